# --kv-cache-dtype (docs/engine.md#kv-cache-dtype) on weft-tiny: int8 KV keeps generate's
# greedy text, bench and perplexity report the type, a bad spelling is named.
set(kv_generate "$<TARGET_FILE:weft> generate --device cpu --prompt 'The whale' --max-tokens 16 --ignore-eos --kv-cache-dtype")
add_test(NAME weft_generate_kv_int8_keeps_greedy_text
         COMMAND sh -c "a=$(${kv_generate} f32) && b=$(${kv_generate} int8) && echo \"$a|$b\" && [ -n \"$a\" ] && [ \"$a\" = \"$b\" ]")
add_test(NAME weft_generate_rejects_bad_kv_dtype
         COMMAND weft generate --prompt-ids 1 --kv-cache-dtype int4)
set_tests_properties(weft_generate_rejects_bad_kv_dtype PROPERTIES PASS_REGULAR_EXPRESSION
  "--kv-cache-dtype: kv cache dtype \"int4\" is not one of auto, f32, bf16, fp16, int8, fp8")
add_test(NAME weft_bench_kv_int8
         COMMAND weft bench --num-requests 3 --input-len 12 --output-len 4 --threads 1 --kv-cache-dtype int8)
set_tests_properties(weft_bench_kv_int8 PROPERTIES PASS_REGULAR_EXPRESSION
  "\"kv_cache_dtype\":\"int8\",\"kv_page_bytes\":34816,\"kv_pool_tokens\":123360")
add_test(NAME weft_perplexity_kv_fp8
         COMMAND weft perplexity --file ${CMAKE_SOURCE_DIR}/models/weft-tiny/heldout-documents.txt --window 256 --stride 128 --format json --kv-cache-dtype fp8)
set_tests_properties(weft_perplexity_kv_fp8 PROPERTIES PASS_REGULAR_EXPRESSION "\"kv_cache_dtype\":\"fp8\"")
