# weft quantize and --quantize (docs/quantization.md) as a user runs them: a written folder
# generates text, and unknown format names list the supported ones.
set(quantized_tiny ${CMAKE_BINARY_DIR}/test-output/weft-tiny-q4_b32)
add_test(NAME weft_quantize_then_generate
         COMMAND sh -c "rm -rf '${quantized_tiny}' && $<TARGET_FILE:weft> quantize --model '${CMAKE_SOURCE_DIR}/models/weft-tiny' --format q4_b32 --out '${quantized_tiny}' && $<TARGET_FILE:weft> generate --model '${quantized_tiny}' --prompt 'The whale' --max-tokens 4 --format json")
set_tests_properties(weft_quantize_then_generate PROPERTIES PASS_REGULAR_EXPRESSION
  "wrote [^\n]*: 74 tensors, 56 of them q4_b32;.*\"finish_reason\":\"length\",\"prompt_tokens\":[0-9]+,\"completion_tokens\":4,")
add_test(NAME weft_generate_quantize_on_load
         COMMAND weft generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --quantize q8 --prompt "The whale" --max-tokens 4 --format json)
set_tests_properties(weft_generate_quantize_on_load PROPERTIES PASS_REGULAR_EXPRESSION
  "^\\{\"id\":[0-9]+,\"text\":\" was\"")
add_test(NAME weft_quantize_unknown_format
         COMMAND weft quantize --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --format q4_k --out ${CMAKE_BINARY_DIR}/test-output/never-written)
set_tests_properties(weft_quantize_unknown_format PROPERTIES PASS_REGULAR_EXPRESSION
  "unknown quantization format \"q4_k\"; supported: q8_b32, q8_b64, .*q3h_b64.*q2_b64")
add_test(NAME weft_perplexity_quantize_unknown_format
         COMMAND weft perplexity --quantize q9 --file ${CMAKE_SOURCE_DIR}/models/weft-tiny/heldout-head.txt)
set_tests_properties(weft_perplexity_quantize_unknown_format PROPERTIES PASS_REGULAR_EXPRESSION
  "--quantize: unknown quantization format \"q9\"; supported: q8_b32")
# A GGUF file quantized at load (docs/quantization.md): the F32 file holds weft-tiny's values,
# so it continues a prompt exactly as the folder does with the same --quantize.
if(TARGET make_gguf)
  set(quant_gen "$<TARGET_FILE:weft> generate --prompt \"Call me Ishmael.\" --max-tokens 16 --format json --quantize q4_b32 --model")
  add_test(NAME weft_gguf_quantize_matches_folder
           COMMAND sh -c "a=$(${quant_gen} ${CMAKE_SOURCE_DIR}/models/weft-tiny) && b=$(${quant_gen} ${CMAKE_BINARY_DIR}/test-data/gguf/weft-tiny-f32.gguf) && echo \"$b\" && [ \"$a\" = \"$b\" ]")
  set_tests_properties(weft_gguf_quantize_matches_folder PROPERTIES FIXTURES_REQUIRED gguf_files
    PASS_REGULAR_EXPRESSION "\"completion_tokens\":16,")
endif()
# --quantize holds on generate's engine paths too (speculation, beams, KV-Compress): prompt-lookup
# speculation gives plain greedy decoding's text in q2_b32 (which is not the unquantized text).
set(q2_args "generate --device cpu --threads 1 --max-tokens 24 --ignore-eos --quantize q2_b32 --prompt 'It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of foolishness'")
add_test(NAME weft_generate_speculative_keeps_quantize
         COMMAND sh -c "plain=$($<TARGET_FILE:weft> ${q2_args} 2>/dev/null) && spec=$($<TARGET_FILE:weft> ${q2_args} --speculate prompt-lookup 2>/dev/null) && echo \"plain: $plain\" && echo \"spec: $spec\" && [ -n \"$plain\" ] && [ \"$plain\" = \"$spec\" ]")
