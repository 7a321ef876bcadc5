# Sourced by the device scripts after carry.sh: the Llama-3 tokenizer carried in .devcarry/l3
# unpacked (TOK) and the random 8B folder of bench/make_random_model.py at /tmp/llama8b (M),
# made once per machine.
TOK=.devcarry/l3
[ -f $TOK/tokenizer.json ] || xz -dk $TOK/tokenizer.json.xz
M=/tmp/llama8b
[ -f $M/config.json ] || python3 bench/make_random_model.py --shape 8b --tokenizer $TOK --out $M 2>&1 | tail -1
