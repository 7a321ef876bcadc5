# weft bench through the engine on weft-tiny: every request finishes, the last line is JSON.
add_test(NAME weft_bench_small
         COMMAND weft bench --num-requests 6 --input-len 12 --output-len 5 --range-ratio 0.5 --threads 1)
set_tests_properties(weft_bench_small PROPERTIES PASS_REGULAR_EXPRESSION
  "\n\\{\"requests\":6,\"failed\":0,\"duration_s\":[^,]+,\"requests_per_s\":[^,]+,\"input_tokens_per_s\":[^,]+,\"output_tokens_per_s\":[^,]+,\"ttft_ms_p50\":[^,]+,\"ttft_ms_p99\":[^,]+,\"tpot_ms_p50\":[^,]+,\"tpot_ms_p99\":[^,]+,\"itl_ms_p50\":[^,]+,\"itl_ms_p99\":[^,]+,\"peak_kv_pages\":[1-9]")
add_test(NAME weft_bench_poisson_optimistic
         COMMAND weft bench --num-requests 6 --input-len 40 --output-len 6 --request-rate 50 --admission optimistic --kv-budget-mb 1 --threads 1)
set_tests_properties(weft_bench_poisson_optimistic PROPERTIES PASS_REGULAR_EXPRESSION "\"failed\":0,")
# Closed loop (--max-concurrency): two clients, each sending its next request when its last
# one finished; every request finishes.
add_test(NAME weft_bench_max_concurrency
         COMMAND weft bench --num-requests 5 --input-len 6 --output-len 4 --max-concurrency 2 --threads 1)
set_tests_properties(weft_bench_max_concurrency PROPERTIES PASS_REGULAR_EXPRESSION
  "\"requests\":5,\"failed\":0,.*\"output_tokens\":20,.*\"max_concurrency\":2")
# The JSON names the settings the engine ran with: the step budget resolved (512 on the CPU
# when --max-tokens-per-step is left at 0), or the one given.
add_test(NAME weft_bench_reports_its_settings
         COMMAND weft bench --num-requests 2 --input-len 6 --output-len 2 --max-running 3 --threads 1)
set_tests_properties(weft_bench_reports_its_settings PROPERTIES PASS_REGULAR_EXPRESSION
  "\"schedule_policy\":\"fcfs\",\"max_tokens_per_step\":512,\"max_running\":3,\"tensor_parallel\":1,\"pipeline_parallel\":1,")
add_test(NAME weft_bench_reports_a_given_step_budget
         COMMAND weft bench --num-requests 2 --input-len 6 --output-len 2 --max-tokens-per-step 40 --threads 1)
set_tests_properties(weft_bench_reports_a_given_step_budget PROPERTIES PASS_REGULAR_EXPRESSION
  "\"max_tokens_per_step\":40,")
add_test(NAME weft_bench_max_concurrency_excludes_rate
         COMMAND weft bench --max-concurrency 2 --request-rate 5)
set_tests_properties(weft_bench_max_concurrency_excludes_rate PROPERTIES WILL_FAIL TRUE)
add_test(NAME weft_bench_bad_admission COMMAND weft bench --admission lazy)
set_tests_properties(weft_bench_bad_admission PROPERTIES WILL_FAIL TRUE)

# --dataset: the lengths of a workload file (tests/tools/bench/*.jsonl); every output token of
# every line is generated (EOS ignored), so the token counts are exact: 12 + 3 + 30 prompt and
# 5 + 3 + 9 output tokens.
set(bench_data ${CMAKE_CURRENT_SOURCE_DIR}/bench)
add_test(NAME weft_bench_dataset
         COMMAND weft bench --dataset ${bench_data}/tiny_workload.jsonl --threads 1)
set_tests_properties(weft_bench_dataset PROPERTIES PASS_REGULAR_EXPRESSION
  "\"requests\":3,\"failed\":0,.*\"input_tokens\":45,\"output_tokens\":17,\"dataset\":\"[^\"]*tiny_workload.jsonl\"")
add_test(NAME weft_bench_dataset_first_n
         COMMAND weft bench --dataset ${bench_data}/tiny_workload.jsonl --num-requests 2 --request-rate 100 --threads 1)
set_tests_properties(weft_bench_dataset_first_n PROPERTIES PASS_REGULAR_EXPRESSION
  "\"requests\":2,\"failed\":0,.*\"input_tokens\":15,\"output_tokens\":8,")
add_test(NAME weft_bench_dataset_bad_length
         COMMAND weft bench --dataset ${bench_data}/bad_output_len.jsonl)
set_tests_properties(weft_bench_dataset_bad_length PROPERTIES PASS_REGULAR_EXPRESSION
  "weft bench: --dataset: [^\n]*bad_output_len.jsonl:2: output_len must be an integer in \\[1, 1048576\\], not 0")
add_test(NAME weft_bench_dataset_bad_token
         COMMAND weft bench --dataset ${bench_data}/bad_token.jsonl)
set_tests_properties(weft_bench_dataset_bad_token PROPERTIES PASS_REGULAR_EXPRESSION
  "bad_token.jsonl:2: prompt_ids\\[1\\] = 99999999 is not a token id in \\[0, [0-9]+\\)")
# A different schema per request (--json-schema-dir) and the replay of the same work without
# a constraint (--write-dataset, then --dataset): same requests, prompt and output tokens.
add_test(NAME weft_bench_schema_dir_replay
         COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/bench/replay_check.sh $<TARGET_FILE:weft>
                 ${bench_data}/schemas ${CMAKE_CURRENT_BINARY_DIR}/bench_replay)
set_tests_properties(weft_bench_schema_dir_replay PROPERTIES PASS_REGULAR_EXPRESSION "replay matches")
add_test(NAME weft_bench_schema_dir_empty COMMAND weft bench --json-schema-dir ${bench_data})
set_tests_properties(weft_bench_schema_dir_empty PROPERTIES PASS_REGULAR_EXPRESSION
  "weft bench: --json-schema-dir: [^\n]*bench: no \\*.json files")
add_test(NAME weft_bench_dataset_missing COMMAND weft bench --dataset /nonexistent/workload.jsonl)
set_tests_properties(weft_bench_dataset_missing PROPERTIES PASS_REGULAR_EXPRESSION
  "weft bench: --dataset: /nonexistent/workload.jsonl: cannot be read")
add_test(NAME weft_bench_dataset_excludes_lengths
         COMMAND weft bench --dataset ${bench_data}/tiny_workload.jsonl --input-len 5)
set_tests_properties(weft_bench_dataset_excludes_lengths PROPERTIES PASS_REGULAR_EXPRESSION "excludes")
# The ShareGPT-shaped workload script writes what --dataset reads.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  add_test(NAME weft_bench_sharegpt_workload
           COMMAND sh -c "${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/make_sharegpt_workload.py --num-requests 200 --out sharegpt_200.jsonl && $<TARGET_FILE:weft> bench --dataset sharegpt_200.jsonl --num-requests 3 --threads 1"
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(weft_bench_sharegpt_workload PROPERTIES PASS_REGULAR_EXPRESSION
    "input: mean 2[0-9][0-9]\\.[0-9], median.*wrote 200 requests.*\"requests\":3,\"failed\":0,")
  # The step loop's phase timings in the JSON, and the overlapped loop's output equal to the
  # serial loop's (docs/engine.md#step-phases).
  add_test(NAME weft_bench_step_phases
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/bench/step_phases_check.py
                   $<TARGET_FILE:weft>)
  set_tests_properties(weft_bench_step_phases PROPERTIES PASS_REGULAR_EXPRESSION
                       "step phases reported; same output")
endif()

# --multi-turn: conversations sharing a system prompt; from turn 2 on, the previous turn's
# pages are reused (here 32 of 52 and 48 of 64 prompt tokens), and none with the cache off.
add_test(NAME weft_bench_multi_turn
         COMMAND weft bench --multi-turn 3 --num-requests 2 --system-prompt-len 32 --input-len 8 --output-len 4 --threads 1)
set_tests_properties(weft_bench_multi_turn PROPERTIES PASS_REGULAR_EXPRESSION
                     "\"failed\":0,.*\"prefix_cache_hit_rate_by_turn\":\\[0E0,6\\.15[0-9]*E-1,7\\.5E-1\\]")
add_test(NAME weft_bench_multi_turn_no_cache
         COMMAND weft bench --multi-turn 2 --num-requests 2 --system-prompt-len 32 --input-len 8 --output-len 4 --threads 1 --prefix-cache off)
set_tests_properties(weft_bench_multi_turn_no_cache PROPERTIES PASS_REGULAR_EXPRESSION
                     "\"failed\":0,.*\"prefix_cache_hit_rate_by_turn\":\\[0E0,0E0\\]")
add_test(NAME weft_bench_system_prompt_needs_multi_turn COMMAND weft bench --system-prompt-len 8)
set_tests_properties(weft_bench_system_prompt_needs_multi_turn PROPERTIES WILL_FAIL TRUE)

# bench/step_overlap_bench: the serial and the overlapped step loop on the simulated device give
# the same tokens (it exits 1 otherwise), stop strings ending sequences in flight included.
if(TARGET step_overlap_bench)
  add_test(NAME step_overlap_bench_same_tokens
           COMMAND step_overlap_bench --requests 24 --concurrency 8 --forward-us 1000
                   --input-len 8 --output-len 48 --stop-every 2 --reps 1)
  set_tests_properties(step_overlap_bench_same_tokens PROPERTIES PASS_REGULAR_EXPRESSION
                       "overlapped [^\n]*failed 0\n[^\n]*dropped [1-9][0-9]*\n.*same tokens: yes")
endif()
