# --kv-compress-rate (docs/kv-compress.md) on weft-tiny: bench compresses every request and
# reports the pages freed, perplexity reports the rate, generate runs through the engine, and
# a rate or window out of range is named.
add_test(NAME weft_bench_kv_compress
         COMMAND weft bench --device cpu --num-requests 4 --input-len 80 --output-len 4 --threads 1 --kv-compress-rate 0.5)
set_tests_properties(weft_bench_kv_compress PROPERTIES PASS_REGULAR_EXPRESSION
  "\"kv_compressions\":4,\"kv_compressed_pages\":8")
add_test(NAME weft_perplexity_kv_compress
         COMMAND weft perplexity --file ${CMAKE_SOURCE_DIR}/models/weft-tiny/heldout-documents.txt --window 256 --stride 128 --format json --kv-compress-rate 0.5 --kv-compress-window 8)
set_tests_properties(weft_perplexity_kv_compress PROPERTIES PASS_REGULAR_EXPRESSION
  "\"kv_compress_rate\":5E-1,\"kv_compress_window\":8")
add_test(NAME weft_generate_kv_compress
         COMMAND weft generate --device cpu --prompt "The whale, the sea and the ship were all that the men of the Pequod knew for three long years" --max-tokens 4 --ignore-eos --kv-compress-rate 0.5 --kv-compress-window 4 --page-size 4)
set_tests_properties(weft_generate_kv_compress PROPERTIES PASS_REGULAR_EXPRESSION
  "kv-compress: 4 tokens in [0-9]+ steps, [0-9.]+ s; [1-9][0-9]* KV pages freed")
add_test(NAME weft_bench_rejects_bad_kv_compress_rate
         COMMAND weft bench --kv-compress-rate 1.5)
set_tests_properties(weft_bench_rejects_bad_kv_compress_rate PROPERTIES PASS_REGULAR_EXPRESSION
  "--kv-compress-rate: 1.5 is outside \\[0, 1\\) \\(0: off\\)")
add_test(NAME weft_serve_rejects_bad_kv_compress_window
         COMMAND weft serve --kv-compress-window 0)
set_tests_properties(weft_serve_rejects_bad_kv_compress_window PROPERTIES PASS_REGULAR_EXPRESSION
  "--kv-compress-window: 0 is outside \\[1, 4096\\]")
add_test(NAME weft_generate_kv_compress_refuses_pipeline
         COMMAND weft generate --device cpu --prompt "x" --kv-compress-rate 0.5 --pipeline-parallel 2)
set_tests_properties(weft_generate_kv_compress_refuses_pipeline PROPERTIES PASS_REGULAR_EXPRESSION
  "--kv-compress-rate: not with --pipeline-parallel, --cpu-layers or a GPU budget so far")
# --kv-compress-heads variable: bench frees the same pages as uniform (the per-head counts are
# whole pages that add up to the uniform total), perplexity and generate run it, and a GPU
# device or an unknown value is refused by name.
add_test(NAME weft_bench_kv_compress_variable_heads
         COMMAND weft bench --device cpu --num-requests 4 --input-len 80 --output-len 4 --threads 1 --kv-compress-rate 0.5 --kv-compress-heads variable)
set_tests_properties(weft_bench_kv_compress_variable_heads PROPERTIES PASS_REGULAR_EXPRESSION
  "\"kv_compressions\":4,\"kv_compressed_pages\":8")
add_test(NAME weft_perplexity_kv_compress_variable_heads
         COMMAND weft perplexity --file ${CMAKE_SOURCE_DIR}/models/weft-tiny/heldout-documents.txt --window 256 --stride 128 --format json --kv-compress-rate 0.5 --kv-compress-window 8 --kv-compress-heads variable)
set_tests_properties(weft_perplexity_kv_compress_variable_heads PROPERTIES PASS_REGULAR_EXPRESSION
  "\"kv_compress_heads\":\"variable\"")
add_test(NAME weft_generate_kv_compress_variable_heads
         COMMAND weft generate --device cpu --prompt "The whale, the sea and the ship were all that the men of the Pequod knew for three long years" --max-tokens 4 --ignore-eos --kv-compress-rate 0.5 --kv-compress-window 4 --page-size 4 --kv-compress-heads variable)
set_tests_properties(weft_generate_kv_compress_variable_heads PROPERTIES PASS_REGULAR_EXPRESSION
  "kv-compress: 4 tokens in [0-9]+ steps, [0-9.]+ s; [1-9][0-9]* KV pages freed")
add_test(NAME weft_generate_kv_compress_variable_heads_refuses_gpu
         COMMAND weft generate --device cuda:0 --prompt "x" --kv-compress-rate 0.5 --kv-compress-heads variable)
set_tests_properties(weft_generate_kv_compress_variable_heads_refuses_gpu PROPERTIES PASS_REGULAR_EXPRESSION
  "kv_compress_heads \"variable\": the CPU backend only so far")
add_test(NAME weft_bench_rejects_bad_kv_compress_heads
         COMMAND weft bench --kv-compress-heads some)
set_tests_properties(weft_bench_rejects_bad_kv_compress_heads PROPERTIES PASS_REGULAR_EXPRESSION
  "--kv-compress-heads: some not in \\{uniform,variable\\}")
