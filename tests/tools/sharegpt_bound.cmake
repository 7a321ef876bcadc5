# bench/sharegpt_bound.py: the lower bound on an offline run's duration. The tiny workload and
# model (tests/tools/bench/bound/, apart from the bench folder's *.json schemas) counted by
# hand with docs/engine.md's formulas ("How fast can this workload go"): N(rows) = 4.9 +
# 0.1 rows ms, 0.001 ms per key, a prefill row weighs 0.5;
# 3 steps x N((2 + 0.5 x 6) / 3) + 0.001 x 11 keys = 15.211 ms (4 tokens: 263.0 tok/s); capped at
# 2 outputs 2 x N(4 / 2) + 0.005 = 10.205 ms; the floor 3 x 3 ms + 19 tokens x 1 MB / 1 TB/s.
find_package(Python3 COMPONENTS Interpreter QUIET)
if(Python3_Interpreter_FOUND)
  set(bound_py ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/sharegpt_bound.py)
  add_test(NAME sharegpt_bound_tiny
           COMMAND ${bound_py} ${bench_data}/bound/tiny.jsonl --model ${bench_data}/bound/tiny_model.json
                   --caps 2 --steps 4 --json)
  set_tests_properties(sharegpt_bound_tiny PROPERTIES PASS_REGULAR_EXPRESSION
    "\"cap\": null, [^}]*\"n_min\": 3, \"decode_rows\": 2, \"decode_keys\": 11, [^}]*\"bound_ms\": 15.211, \"bound_steps\": 3, \"bound_output_tok_s\": 263.0, [^}]*\"floor_ms\": 9.019, [^}]*\"floor_output_tok_s\": 443.5, \"steps_given\": 4, \"steps_bound_ms\": 20.111[^}]*\\}, \\{\"cap\": 2, [^}]*\"bound_ms\": 10.205, [^}]*\"bound_output_tok_s\": 294.0, [^}]*\"floor_ms\": 6.012")
  add_test(NAME sharegpt_bound_bad_line COMMAND ${bound_py} ${bench_data}/bad_output_len.jsonl)
  set_tests_properties(sharegpt_bound_bad_line PROPERTIES PASS_REGULAR_EXPRESSION
    "bad_output_len.jsonl:2: output_len must be an integer >= 1, not 0")
  add_test(NAME sharegpt_bound_too_few_steps
           COMMAND ${bound_py} ${bench_data}/bound/tiny.jsonl --steps 2)
  set_tests_properties(sharegpt_bound_too_few_steps PROPERTIES PASS_REGULAR_EXPRESSION
    "--steps 2 is fewer than the longest request's 3 output tokens")
  add_test(NAME sharegpt_bound_bad_model
           COMMAND ${bound_py} ${bench_data}/bound/tiny.jsonl --model ${bench_data}/bound/tiny.jsonl)
  set_tests_properties(sharegpt_bound_bad_model PROPERTIES PASS_REGULAR_EXPRESSION "bound/tiny.jsonl: not JSON")
  # The H100 defaults on a generated ShareGPT-shaped workload: a bound and a floor per cap.
  add_test(NAME sharegpt_bound_defaults
           COMMAND sh -c "${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/make_sharegpt_workload.py --num-requests 300 --out bound_sg300.jsonl > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/sharegpt_bound.py bound_sg300.jsonl --caps 512")
  set_tests_properties(sharegpt_bound_defaults PROPERTIES PASS_REGULAR_EXPRESSION
    "300 requests.*\nnone \\| [0-9]+ \\| [0-9.]+ \\| [0-9,]+ .*\n512 \\| ")
endif()

# bench/sched_sim_bench: the real scheduler on a virtual clock. With a flat step model (every
# step 10 ms) the tiny workload (12/5, 3/3 and 30/9 input/output tokens) is counted by hand:
# a 64-token budget prefills all three in step 1, then the 9-token request needs 8 more steps
# (9 steps, 90 ms, 17 tokens: 188.9 tok/s); a 16-token budget prefills 12 + 3 + 1, then 14 and
# 14 beside the decodes, the last prompt token in step 4 (TTFT 40 ms), 8 more: 12 steps; the
# longest first: 16, 14 + 2, then 10 + 3 beside the first decode: 10 steps, 170.0 tok/s.
if(TARGET sched_sim_bench)
  set(sim_flat --dataset ${bench_data}/tiny_workload.jsonl --decode-points 1:10 --kv-point 1:1000:10 --prefill 1:10 --first-step all --json)
  add_test(NAME sched_sim_tiny COMMAND sched_sim_bench ${sim_flat} --max-tokens-per-step 64,16)
  set_tests_properties(sched_sim_tiny PROPERTIES PASS_REGULAR_EXPRESSION
    "\"max_tokens_per_step\":64,[^\n]*\"output_tokens\":17,\"duration_s\":0.090,\"output_tokens_per_s\":188.9,\"steps\":9,[^\n]*\n[^\n]*\"max_tokens_per_step\":16,[^\n]*\"duration_s\":0.120,\"output_tokens_per_s\":141.7,\"steps\":12,[^\n]*\"ttft_ms_p50\":10.0,\"ttft_ms_p99\":40.0,")
  add_test(NAME sched_sim_longest_first COMMAND sched_sim_bench ${sim_flat} --max-tokens-per-step 16 --order longest)
  set_tests_properties(sched_sim_longest_first PROPERTIES PASS_REGULAR_EXPRESSION
    "\"duration_s\":0.100,\"output_tokens_per_s\":170.0,\"steps\":10,")
  # The default H100 model fits to what bench/sharegpt_bound.py derives from the same points.
  add_test(NAME sched_sim_default_model COMMAND sched_sim_bench --dataset ${bench_data}/tiny_workload.jsonl)
  set_tests_properties(sched_sim_default_model PROPERTIES PASS_REGULAR_EXPRESSION
    "3 requests from [^\n]*offline; step model: 45.9 ns per key, prefill row weight 0.756\n")
  add_test(NAME sched_sim_bad_line COMMAND sched_sim_bench --dataset ${bench_data}/bad_output_len.jsonl)
  set_tests_properties(sched_sim_bad_line PROPERTIES PASS_REGULAR_EXPRESSION
    "bad_output_len.jsonl:2: output_len must be an integer in \\[1, 1048576\\], not 0")
  add_test(NAME sched_sim_bad_kv_point COMMAND sched_sim_bench --dataset ${bench_data}/tiny_workload.jsonl --kv-point 1:100:5)
  set_tests_properties(sched_sim_bad_kv_point PROPERTIES PASS_REGULAR_EXPRESSION
    "the kv point \\(BATCH:CONTEXT:MS\\) needs a context above the decode context \\(512\\)")
endif()

# The engine and the simulation plan the same steps (docs/engine.md#step-trace): 40 requests of
# the ShareGPT-shaped workload (lengths / 8) sorted longest output first, on weft-tiny with a
# 32-token budget and 8 running. Both must admit them in the file's order and take the longest
# request's 158 steps (every step agrees when the engine's first step runs the first request
# alone, as it usually does; a step of slack for the race of the first arrivals). Before weft
# bench handed offline requests over in file order, the engine admitted them mostly in reverse
# (outputs 90, 31, 22, 7, ... where the file has 158, 90, 63, 50) and took 248 steps.
if(TARGET sched_sim_bench AND Python3_Interpreter_FOUND)
  set(trace_args "--dataset ${bench_data}/longest_first_40.jsonl --max-running 8 --max-tokens-per-step 32")
  add_test(NAME weft_bench_step_trace_matches_simulation
           COMMAND sh -c "$<TARGET_FILE:weft> bench ${trace_args} --threads 1 --step-trace engine_steps.jsonl > /dev/null && $<TARGET_FILE:sched_sim_bench> ${trace_args} --kv-pages 2048 --step-trace sim_steps.jsonl > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/step_trace_summary.py engine_steps.jsonl sim_steps.jsonl --workload ${bench_data}/longest_first_40.jsonl --tolerance 1"
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(weft_bench_step_trace_matches_simulation PROPERTIES PASS_REGULAR_EXPRESSION
    "engine_steps.jsonl \\(engine\\): 15[89] steps, 40 requests admitted.*admission orders agree \\(40 requests\\).*engine_steps.jsonl admitted the 40 requests in the file's order")
  add_test(NAME sched_sim_step_trace_one_run
           COMMAND sched_sim_bench --dataset ${bench_data}/tiny_workload.jsonl --max-running 8,16 --step-trace x.jsonl)
  set_tests_properties(sched_sim_step_trace_one_run PROPERTIES PASS_REGULAR_EXPRESSION
    "--step-trace: give one value of each setting \\(one run\\), not a grid")
  add_test(NAME weft_bench_step_trace_unwritable
           COMMAND weft bench --dataset ${bench_data}/tiny_workload.jsonl --step-trace /nonexistent/dir/steps.jsonl)
  set_tests_properties(weft_bench_step_trace_unwritable PROPERTIES PASS_REGULAR_EXPRESSION
    "step trace: /nonexistent/dir/steps.jsonl: cannot be written")
  add_test(NAME step_trace_summary_not_a_trace
           COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/step_trace_summary.py ${bench_data}/tiny_workload.jsonl)
  set_tests_properties(step_trace_summary_not_a_trace PROPERTIES PASS_REGULAR_EXPRESSION
    "tiny_workload.jsonl: not a step trace")
endif()

# --schedule-policy lof: the same 40 requests in the workload's own order, queued longest output
# first by the scheduler: the engine starts the 158-token request in its first or second step
# (the first step runs whatever has arrived when the step loop wakes: usually the first request
# alone, then the simulation's 159 steps; on a loaded machine all 40 at once, then 158) and ends
# with that request's chain of steps: 158 to 162 steps, against 223 in arrival order.
if(TARGET sched_sim_bench AND Python3_Interpreter_FOUND)
  set(lof_args "--dataset ${bench_data}/sharegpt_40.jsonl --max-running 8 --max-tokens-per-step 32 --schedule-policy lof")
  add_test(NAME weft_bench_longest_output_first
           COMMAND sh -c "$<TARGET_FILE:weft> bench ${lof_args} --threads 1 --step-trace lof_engine_steps.jsonl > /dev/null && ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/bench/step_trace_summary.py lof_engine_steps.jsonl"
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(weft_bench_longest_output_first PROPERTIES PASS_REGULAR_EXPRESSION
    "lof_engine_steps.jsonl \\(engine\\): 1(5[89]|6[0-2]) steps, 40 requests admitted.*first outputs admitted: \\[([0-9]+, )?([0-9]+, )?158,")
  add_test(NAME weft_bench_bad_schedule_policy COMMAND weft bench --schedule-policy sjf)
  set_tests_properties(weft_bench_bad_schedule_policy PROPERTIES PASS_REGULAR_EXPRESSION "--schedule-policy: sjf not in \\{fcfs,lof\\}")
endif()
