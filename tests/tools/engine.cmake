# weft bench through the engine on weft-tiny: every request finishes, the last line is JSON.
add_test(NAME weft_bench_small
         COMMAND weft bench --num-requests 6 --input-len 12 --output-len 5 --range-ratio 0.5 --threads 1)
set_tests_properties(weft_bench_small PROPERTIES PASS_REGULAR_EXPRESSION
  "\n\\{\"requests\":6,\"failed\":0,\"duration_s\":[^,]+,\"requests_per_s\":[^,]+,\"input_tokens_per_s\":[^,]+,\"output_tokens_per_s\":[^,]+,\"ttft_ms_p50\":[^,]+,\"ttft_ms_p99\":[^,]+,\"itl_ms_p50\":[^,]+,\"itl_ms_p99\":[^,]+,\"peak_kv_pages\":[1-9]")
add_test(NAME weft_bench_poisson_optimistic
         COMMAND weft bench --num-requests 6 --input-len 40 --output-len 6 --request-rate 50 --admission optimistic --kv-budget-mb 1 --threads 1)
set_tests_properties(weft_bench_poisson_optimistic PROPERTIES PASS_REGULAR_EXPRESSION "\"failed\":0,")
add_test(NAME weft_bench_bad_admission COMMAND weft bench --admission lazy)
set_tests_properties(weft_bench_bad_admission PROPERTIES WILL_FAIL TRUE)
