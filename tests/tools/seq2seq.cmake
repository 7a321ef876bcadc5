# weft generate on encoder-decoder folders: the committed random-weight T5 and M2M100
# (tests/fixtures/seq2seq_tiny, made by make_tiny_seq2seq.py with the standard library).
# Their numbers are checked against a double-precision reference by seq2seq_model_test and
# against transformers by seq2seq_fixture_test. The pinned ids are the CPU's (--device cpu, so
# a machine with a GPU gives them too); the GPU's tests are at the end.
set(seq2seq_tiny ${CMAKE_SOURCE_DIR}/tests/fixtures/seq2seq_tiny)

# Through the engine. The expected ids are what the direct Seq2SeqSession loop `weft generate`
# ran before the engine took these models printed for the same requests (greedy; and seeded
# sampling at temperature 1.5, seed 7, where the tiny T5 samples its eos third).
set(seq2seq_greedy_t5 "16 10 27 8 8 8 8 8 8 8")
set(seq2seq_greedy_m2m100 "36 36 36 36 36 36 36 36 36 36")
set(seq2seq_sampled_t5 "45,19,1,14,13,13")
set(seq2seq_sampled_m2m100 "44,21,1,20,14,17")
foreach(family t5 m2m100)
  # Greedy, 10 ids whatever eos says.
  add_test(NAME weft_generate_seq2seq_${family}
           COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/${family} --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 10 --ignore-eos --device cpu 2>&1; echo exit=$?")
  set_tests_properties(weft_generate_seq2seq_${family} PROPERTIES PASS_REGULAR_EXPRESSION
    "^${seq2seq_greedy_${family}}\nexit=0\n$")
  # The same seed samples the same tokens, those of the direct loop; the json summary counts them.
  add_test(NAME weft_generate_seq2seq_${family}_sampled
           COMMAND sh -c "for i in 1 2; do \"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/${family} --device cpu --prompt-ids 5,9,3,2 --max-tokens 6 --ignore-eos --temperature 1.5 --seed 7 --format json | grep -o '\"id\":[0-9]*' | tr -d '\"id:' | paste -sd,; done | uniq")
  set_tests_properties(weft_generate_seq2seq_${family}_sampled PROPERTIES PASS_REGULAR_EXPRESSION
    "^${seq2seq_sampled_${family}}\n$")
endforeach()
# Stops at the decoder's eos (1) without --ignore-eos: finish_reason stop after 3 tokens.
add_test(NAME weft_generate_seq2seq_eos
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --device cpu --prompt-ids 5,9,3,2 --max-tokens 6 --temperature 1.5 --seed 7 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_eos PROPERTIES PASS_REGULAR_EXPRESSION "^45 19 1\nexit=0\n$")
add_test(NAME weft_generate_seq2seq_json
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --device cpu --prompt-ids 5,9,2 --max-tokens 3 --ignore-eos --format json --top-logprobs 2 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_json PROPERTIES PASS_REGULAR_EXPRESSION
  "(\\{\"id\":[0-9]+,\"logprob\":[^,]+,\"top_logprobs\":\\[\\{\"id\":[0-9]+,\"logprob\":[^}]+\\},\\{[^]]+\\]\\}\n)+\\{\"finish_reason\":\"length\",\"prompt_tokens\":3,\"completion_tokens\":3,[^\n]+\nexit=0\n$")
add_test(NAME weft_generate_seq2seq_bad_id
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --device cpu --prompt-ids 5,480 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_bad_id PROPERTIES PASS_REGULAR_EXPRESSION
  "weft generate: prompt token id 480 is outside the model's vocabulary \\[0, 48\\)\nexit=1\n$")
add_test(NAME weft_generate_seq2seq_no_tokenizer
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --device cpu --prompt hello 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_no_tokenizer PROPERTIES PASS_REGULAR_EXPRESSION
  "has no tokenizer.json; use --prompt-ids\nexit=1\n$")
add_test(NAME weft_generate_seq2seq_constrained
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/m2m100 --device cpu --prompt-ids 5,2 --json-object 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_constrained PROPERTIES PASS_REGULAR_EXPRESSION
  "not implemented for encoder-decoder models\nexit=1\n$")
# weft bench and weft serve run encoder-decoder folders through the same engine.
add_test(NAME weft_bench_seq2seq
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" bench --model ${seq2seq_tiny}/t5 --num-requests 6 --input-len 12 --output-len 8 --range-ratio 0 --threads 1 --device cpu 2>/dev/null | tail -1; echo exit=$?")
set_tests_properties(weft_bench_seq2seq PROPERTIES PASS_REGULAR_EXPRESSION
  "\"failed\":0,.*\"output_tokens\":48,.*\nexit=0\n$")
add_test(NAME weft_serve_seq2seq
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gateway/run_with_server.sh $<TARGET_FILE:weft> ${seq2seq_tiny}/t5
                 python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway/seq2seq_client.py)
set_tests_properties(weft_serve_seq2seq PROPERTIES TIMEOUT 120
  ENVIRONMENT "EXPECTED=${seq2seq_greedy_t5};WEFT_SERVE_ARGS=--device cpu"
  PASS_REGULAR_EXPRESSION "\n0 failure\\(s\\)\n"
  FAIL_REGULAR_EXPRESSION "FAIL|weft serve exited with|did not stop|ThreadSanitizer|AddressSanitizer|runtime error")
# A forced decoder prefix (NLLB's target language): greedy after forcing the first greedy token
# continues as the unforced run does, one token later.
add_test(NAME weft_generate_seq2seq_decoder_prefix
         COMMAND sh -c "a=$(\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --device cpu --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 6 --ignore-eos); first=\${a%% *}; b=$(\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --device cpu --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 5 --ignore-eos --decoder-prefix-ids $first); test \"$a\" = \"$first $b\" && echo same")
set_tests_properties(weft_generate_seq2seq_decoder_prefix PROPERTIES PASS_REGULAR_EXPRESSION "^same\n$")
add_test(NAME weft_generate_decoder_prefix_on_decoder_only
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --prompt-ids 1,2 --decoder-prefix-ids 3 2>&1; echo exit=$?")
set_tests_properties(weft_generate_decoder_prefix_on_decoder_only PROPERTIES PASS_REGULAR_EXPRESSION
  "--decoder-prefix-ids is for encoder-decoder models; .*weft-tiny holds a decoder-only one.*\nexit=1\n$")

# On a GPU (model::CudaSeq2SeqBackend, docs/seq2seq.md#on-a-gpu); skipped (exit 77) where no
# GPU is visible. weft generate on the m2m100 transformers fixture gives transformers' greedy
# ids (its top-2 margins, 0.57 and more, are far above bf16's rounding); weft bench runs six
# requests together; weft serve answers as weft generate --device cuda does.
if(WEFT_HAVE_CUDA)
  set(s2s_gpu "[ \"$(nvidia-smi -L 2>/dev/null | grep -c ^GPU)\" -ge 1 ] || { echo 'SKIP: needs a GPU'; exit 77; }")
  file(READ ${CMAKE_SOURCE_DIR}/tests/fixtures/seq2seq/m2m100/reference.json s2s_m2m100_ref)
  string(JSON s2s_n LENGTH "${s2s_m2m100_ref}" encoder_ids)
  set(s2s_source "")
  math(EXPR s2s_last "${s2s_n} - 1")
  foreach(i RANGE ${s2s_last})
    string(JSON id GET "${s2s_m2m100_ref}" encoder_ids ${i})
    list(APPEND s2s_source ${id})
  endforeach()
  string(JOIN "," s2s_source ${s2s_source})
  string(JSON s2s_n LENGTH "${s2s_m2m100_ref}" greedy_ids)
  set(s2s_greedy "")
  math(EXPR s2s_last "${s2s_n} - 1")
  foreach(i RANGE ${s2s_last})
    string(JSON id GET "${s2s_m2m100_ref}" greedy_ids ${i})
    list(APPEND s2s_greedy ${id})
  endforeach()
  string(JOIN " " s2s_greedy ${s2s_greedy})
  add_test(NAME weft_generate_seq2seq_cuda
           COMMAND sh -c "${s2s_gpu}; \"$<TARGET_FILE:weft>\" generate --model ${CMAKE_SOURCE_DIR}/tests/fixtures/seq2seq/m2m100 --prompt-ids ${s2s_source} --max-tokens ${s2s_n} --ignore-eos --device cuda 2>&1; echo exit=$?")
  set_tests_properties(weft_generate_seq2seq_cuda PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120
    PASS_REGULAR_EXPRESSION "^${s2s_greedy}\nexit=0\n$")
  add_test(NAME weft_bench_seq2seq_cuda
           COMMAND sh -c "${s2s_gpu}; \"$<TARGET_FILE:weft>\" bench --model ${seq2seq_tiny}/t5 --num-requests 6 --input-len 12 --output-len 8 --range-ratio 0 --device cuda 2>/dev/null | tail -1; echo exit=$?")
  set_tests_properties(weft_bench_seq2seq_cuda PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 120
    PASS_REGULAR_EXPRESSION "\"failed\":0,.*\"output_tokens\":48,.*\nexit=0\n$")
  add_test(NAME weft_serve_seq2seq_cuda
           COMMAND sh -c "${s2s_gpu}; EXPECTED=$(\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 10 --ignore-eos --device cuda) WEFT_SERVE_ARGS='--device cuda' bash ${CMAKE_CURRENT_SOURCE_DIR}/gateway/run_with_server.sh $<TARGET_FILE:weft> ${seq2seq_tiny}/t5 python3 ${CMAKE_CURRENT_SOURCE_DIR}/gateway/seq2seq_client.py")
  set_tests_properties(weft_serve_seq2seq_cuda PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 180
    PASS_REGULAR_EXPRESSION "\n0 failure\\(s\\)\n"
    FAIL_REGULAR_EXPRESSION "FAIL|weft serve exited with|did not stop|runtime error")
endif()
