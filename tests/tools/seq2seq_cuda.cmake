# weft generate --device cuda on encoder-decoder folders (model::CudaSeq2Seq). On a machine
# without a GPU the run reports no device and the test is skipped; the numbers are checked by
# model_cuda_test (cuda_seq2seq_test.cpp) against transformers and the CPU.
set(seq2seq_tiny ${CMAKE_SOURCE_DIR}/tests/fixtures/seq2seq_tiny)

foreach(family t5 m2m100)
  add_test(NAME weft_generate_seq2seq_cuda_${family}
           COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/${family} --prompt-ids 5,9,3,12,7,30,21,2 --max-tokens 10 --ignore-eos --device cuda 2>&1; echo exit=$?")
  set_tests_properties(weft_generate_seq2seq_cuda_${family} PROPERTIES
    PASS_REGULAR_EXPRESSION "^[0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+ [0-9]+\nexit=0\n$"
    SKIP_REGULAR_EXPRESSION "CUDA: no device|built without CUDA")
endforeach()
# Caches on the GPU are bf16: other --kv-cache-dtype values are refused, naming the option.
add_test(NAME weft_generate_seq2seq_cuda_kv_dtype
         COMMAND sh -c "\"$<TARGET_FILE:weft>\" generate --model ${seq2seq_tiny}/t5 --prompt-ids 5,9,2 --device cuda --kv-cache-dtype int8 2>&1; echo exit=$?")
set_tests_properties(weft_generate_seq2seq_cuda_kv_dtype PROPERTIES PASS_REGULAR_EXPRESSION
  "weft generate: --kv-cache-dtype int8: encoder-decoder models on a GPU keep their caches in bf16 \\(auto or bf16\\)\nexit=1\n$")
