# weft generate on encoder-decoder folders: the committed random-weight T5 and M2M100
# (tests/fixtures/seq2seq_tiny, made by make_tiny_seq2seq.py with the standard library).
# Their numbers are checked against a double-precision reference by seq2seq_model_test and
# against transformers by seq2seq_fixture_test.
set(seq2seq_tiny ${CMAKE_SOURCE_DIR}/tests/fixtures/seq2seq_tiny)

foreach(family t5 m2m100)
  # Greedy, 10 ids whatever eos says.
  add_test(NAME weft_generate_seq2seq_${family}
           COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/${family} --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 10 --ignore-eos --device cpu 2>&1; echo exit=$?")
  set_tests_properties(weft_generate_seq2seq_${family} PROPERTIES PASS_REGULAR_EXPRESSION
    "^[0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+\nexit=0\n$")
  # The same seed samples the same tokens; the json summary counts them.
  add_test(NAME weft_generate_seq2seq_${family}_sampled
           COMMAND sh -c "for i in 1 2; do \"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/${family} --prompt-ids 5,9,3,2 --max-tokens 6 --ignore-eos --temperature 1.5 --seed 7 --format json | tr -d '\\n' | sed 's/\"[a-z]*_seconds\":[^,}]*//g'; echo; done | uniq | wc -l")
  set_tests_properties(weft_generate_seq2seq_${family}_sampled PROPERTIES PASS_REGULAR_EXPRESSION "^1\n$")
endforeach()
add_test(NAME weft_generate_seq2seq_json
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --prompt-ids 5,9,2 --max-tokens 3 --ignore-eos --format json --top-logprobs 2 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_json PROPERTIES PASS_REGULAR_EXPRESSION
  "(\\{\"id\":[0-9]+,\"logprob\":[^,]+,\"top_logprobs\":\\[\\{\"id\":[0-9]+,\"logprob\":[^}]+\\},\\{[^]]+\\]\\}\n)+\\{\"finish_reason\":\"length\",\"prompt_tokens\":3,\"completion_tokens\":3,[^\n]+\nexit=0\n$")
add_test(NAME weft_generate_seq2seq_bad_id
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --prompt-ids 5,480 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_bad_id PROPERTIES PASS_REGULAR_EXPRESSION
  "weft generate: prompt token id 480 is outside the model's vocabulary \\[0, 48\\)\nexit=1\n$")
add_test(NAME weft_generate_seq2seq_no_tokenizer
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --prompt hello 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_no_tokenizer PROPERTIES PASS_REGULAR_EXPRESSION
  "has no tokenizer.json; use --prompt-ids\nexit=1\n$")
add_test(NAME weft_generate_seq2seq_constrained
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/m2m100 --prompt-ids 5,2 --json-object 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_constrained PROPERTIES PASS_REGULAR_EXPRESSION
  "not implemented for encoder-decoder models\nexit=1\n$")
add_test(NAME weft_bench_refuses_seq2seq
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" bench --model ${seq2seq_tiny}/t5 --num-requests 1 2>&1; echo exit=$?")
set_tests_properties(weft_bench_refuses_seq2seq PROPERTIES PASS_REGULAR_EXPRESSION
  "T5ForConditionalGeneration is an encoder-decoder model; it runs with `weft generate`.*exit=1\n$")
# A forced decoder prefix (NLLB's target language): greedy after forcing the first greedy token
# continues as the unforced run does, one token later.
add_test(NAME weft_generate_seq2seq_decoder_prefix
         COMMAND sh -c "a=$(\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 6 --ignore-eos); first=\${a%% *}; b=$(\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 5 --ignore-eos --decoder-prefix-ids $first); test \"$a\" = \"$first $b\" && echo same")
set_tests_properties(weft_generate_seq2seq_decoder_prefix PROPERTIES PASS_REGULAR_EXPRESSION "^same\n$")
add_test(NAME weft_generate_decoder_prefix_on_decoder_only
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --prompt-ids 1,2 --decoder-prefix-ids 3 2>&1; echo exit=$?")
set_tests_properties(weft_generate_decoder_prefix_on_decoder_only PROPERTIES PASS_REGULAR_EXPRESSION
  "--decoder-prefix-ids is for encoder-decoder models; .*weft-tiny holds a decoder-only one.*\nexit=1\n$")
