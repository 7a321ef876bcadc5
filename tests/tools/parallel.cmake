# weft generate --tensor-parallel 2 under mpirun (docs/parallel.md): the same greedy tokens as
# one process on every fixture model, and clear errors for a bad launch.
if(WEFT_HAVE_MPI AND WEFT_MPIEXEC)
  set(tp_launch ${WEFT_MPIEXEC} ${WEFT_MPIEXEC_FLAGS})
  string(REPLACE ";" " " tp_launch_text "${tp_launch}")
  file(GLOB tp_fixtures LIST_DIRECTORIES true ${fixture_models}/*)
  foreach(dir ${tp_fixtures})
    if(NOT EXISTS ${dir}/config.json)
      continue()
    endif()
    get_filename_component(name ${dir} NAME)
    set(tp_args "generate --model ${dir} --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos --device cpu --threads 1")
    add_test(NAME weft_generate_tensor_parallel_${name}
             COMMAND sh -c "one=$($<TARGET_FILE:weft> ${tp_args}) && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${tp_args} --tensor-parallel 2) && echo \"tp1: $one\" && echo \"tp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
    set_tests_properties(weft_generate_tensor_parallel_${name} PROPERTIES TIMEOUT 120)
  endforeach()
  # --quantize with --tensor-parallel 2: each rank quantizes its shard; one process's tokens.
  foreach(format q8_b32 q4_b32)
    set(q_args "generate --model ${fixture_models}/llama_gqa_f32 --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos --device cpu --threads 1 --quantize ${format}")
    add_test(NAME weft_generate_tensor_parallel_quantized_${format}
             COMMAND sh -c "one=$($<TARGET_FILE:weft> ${q_args}) && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${q_args} --tensor-parallel 2) && echo \"tp1: $one\" && echo \"tp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
    set_tests_properties(weft_generate_tensor_parallel_quantized_${format} PROPERTIES TIMEOUT 120)
  endforeach()
  # --pipeline-parallel 2: the same tokens as one process on every fixture model, and on the
  # zoo's families (post-norm, ALiBi, learned positions, parallel attention: a pipeline alone
  # cuts between whole layers, so it takes every block).
  file(GLOB pp_zoo LIST_DIRECTORIES true ${CMAKE_SOURCE_DIR}/tests/fixtures/zoo/*)
  foreach(dir ${tp_fixtures} ${pp_zoo})
    if(NOT EXISTS ${dir}/config.json)
      continue()
    endif()
    get_filename_component(name ${dir} NAME)
    set(pp_args "generate --model ${dir} --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos --device cpu --threads 1")
    add_test(NAME weft_generate_pipeline_parallel_${name}
             COMMAND sh -c "one=$($<TARGET_FILE:weft> ${pp_args}) && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${pp_args} --pipeline-parallel 2) && echo \"pp1: $one\" && echo \"pp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
    set_tests_properties(weft_generate_pipeline_parallel_${name} PROPERTIES TIMEOUT 120)
  endforeach()
  # Hybrid: two stages of two tensor-parallel ranks each (4 processes, oversubscribed).
  set(hybrid_args "generate --model ${fixture_models}/llama_gqa_f32 --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos --device cpu --threads 1")
  add_test(NAME weft_generate_tensor_pipeline_hybrid
           COMMAND sh -c "one=$($<TARGET_FILE:weft> ${hybrid_args}) && four=$(${tp_launch_text} -np 4 $<TARGET_FILE:weft> ${hybrid_args} --tensor-parallel 2 --pipeline-parallel 2 --micro-batches 2) && echo \"one: $one\" && echo \"tp2 x pp2: $four\" && [ -n \"$one\" ] && [ \"$one\" = \"$four\" ]")
  set_tests_properties(weft_generate_tensor_pipeline_hybrid PROPERTIES TIMEOUT 180)
  add_test(NAME weft_generate_pipeline_parallel_needs_mpirun
           COMMAND weft generate --model ${fixture_models}/llama_gqa_f32 --prompt-ids 5 --device cpu --tensor-parallel 2 --pipeline-parallel 2)
  set_tests_properties(weft_generate_pipeline_parallel_needs_mpirun PROPERTIES PASS_REGULAR_EXPRESSION
    "--tensor-parallel 2 x --pipeline-parallel 2 needs 4 processes, one per rank, but MPI started 1: launch with mpirun -np 4")
  add_test(NAME weft_generate_pipeline_parallel_too_many_stages
           COMMAND ${tp_launch} -np 3 $<TARGET_FILE:weft> generate --model ${fixture_models}/llama_gqa_f32
                   --prompt-ids 5 --device cpu --threads 1 --pipeline-parallel 3)
  set_tests_properties(weft_generate_pipeline_parallel_too_many_stages PROPERTIES TIMEOUT 120
    PASS_REGULAR_EXPRESSION "weft generate: [^\n]*llama_gqa_f32: --pipeline-parallel 3 exceeds num_layers \\(2\\)")
  add_test(NAME weft_generate_cpu_layers_needs_gpu
           COMMAND weft generate --model ${fixture_models}/llama_gqa_f32 --prompt-ids 5 --device cpu --cpu-layers 1)
  set_tests_properties(weft_generate_cpu_layers_needs_gpu PROPERTIES PASS_REGULAR_EXPRESSION
    "--cpu-layers keeps some layers on the CPU beside a GPU; on --device cpu every layer is on the CPU already")
  add_test(NAME weft_generate_tensor_parallel_needs_mpirun
           COMMAND weft generate --model ${fixture_models}/llama_gqa_f32 --prompt-ids 5 --device cpu --tensor-parallel 2)
  set_tests_properties(weft_generate_tensor_parallel_needs_mpirun PROPERTIES PASS_REGULAR_EXPRESSION
    "--tensor-parallel 2 needs 2 processes, one per rank, but MPI started 1: launch with mpirun -np 2")
  add_test(NAME weft_generate_tensor_parallel_indivisible
           COMMAND ${tp_launch} -np 3 $<TARGET_FILE:weft> generate --model ${fixture_models}/llama_gqa_f32
                   --prompt-ids 5 --device cpu --threads 1 --tensor-parallel 3)
  set_tests_properties(weft_generate_tensor_parallel_indivisible PROPERTIES TIMEOUT 120
    PASS_REGULAR_EXPRESSION "weft generate: [^\n]*llama_gqa_f32: num_heads \\(4\\) is not divisible by --tensor-parallel 3")
endif()

# weft bench leading a group of two ranks: the engine's steps reach the follower and every
# request finishes. Its progress lines (stderr) land anywhere between the report and the JSON.
if(WEFT_HAVE_MPI AND WEFT_MPIEXEC)
  add_test(NAME weft_bench_tensor_parallel
           COMMAND ${tp_launch} -np 2 $<TARGET_FILE:weft> bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny
                   --device cpu --threads 1 --tensor-parallel 2 --num-requests 3 --input-len 8 --output-len 4)
  set_tests_properties(weft_bench_tensor_parallel PROPERTIES TIMEOUT 180
    PASS_REGULAR_EXPRESSION "requests 3 \\(0 failed\\)[^\n]*\n([^\n]*\n)+[^\n]*\"output_tokens\":12,")
  # Two pipeline stages behind the engine, two micro-batches: the same output digest as one
  # process (the digest of the generated tokens).
  add_test(NAME weft_bench_pipeline_parallel
           COMMAND sh -c "one=$($<TARGET_FILE:weft> bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu --threads 1 --num-requests 3 --input-len 8 --output-len 4 | grep -o 'output_digest\":\"[0-9a-f]*') && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu --threads 1 --num-requests 3 --input-len 8 --output-len 4 --pipeline-parallel 2 --micro-batches 2 | grep -o 'output_digest\":\"[0-9a-f]*') && echo \"one: $one\" && echo \"pp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
  set_tests_properties(weft_bench_pipeline_parallel PROPERTIES TIMEOUT 180)
  # Sequence groups in flight (--pp-groups 2, and 3 over the two stages): one process's output
  # digest, and the groups' steps were in the pipeline together (steps_in_flight_peak).
  set(pp_bench_args bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu --threads 1 --num-requests 8 --input-len 12 --output-len 10)
  string(REPLACE ";" " " pp_bench_text "${pp_bench_args}")
  add_test(NAME weft_bench_pipeline_parallel_groups
           COMMAND sh -c "one=$($<TARGET_FILE:weft> ${pp_bench_text} | grep -o 'output_digest\":\"[0-9a-f]*') && for g in 2 3; do out=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${pp_bench_text} --pipeline-parallel 2 --pp-groups $g | tail -1) && two=$(echo \"$out\" | grep -o 'output_digest\":\"[0-9a-f]*') && peak=$(echo \"$out\" | grep -o 'steps_in_flight_peak\":[0-9]*' | cut -d: -f2) && echo \"one: $one pp2 groups $g: $two, steps in flight at most $peak\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ] && [ \"$peak\" = \"$g\" ] || exit 1; done")
  set_tests_properties(weft_bench_pipeline_parallel_groups PROPERTIES TIMEOUT 180)
endif()

# KV-Compress under tensor parallelism on the CPU (docs/kv-compress.md): each rank compacts its
# own kv heads after the prompt; generate gives one process's text and frees pages, bench one
# process's output digest, compressions and pages freed.
if(WEFT_HAVE_MPI AND WEFT_MPIEXEC)
  set(kvc_args "generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu --threads 1 --prompt 'The whale, the sea and the ship were all that the men of the Pequod knew for three long years, and the captain' --max-tokens 12 --ignore-eos --kv-compress-rate 0.5 --kv-compress-window 4 --page-size 4")
  add_test(NAME weft_generate_tensor_parallel_kv_compress
           COMMAND sh -c "one=$($<TARGET_FILE:weft> ${kvc_args} 2>/dev/null) && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${kvc_args} --tensor-parallel 2 2>${CMAKE_CURRENT_BINARY_DIR}/tp_kv_compress.err) && echo \"tp1: $one\" && echo \"tp2: $two\" && grep 'KV pages freed' ${CMAKE_CURRENT_BINARY_DIR}/tp_kv_compress.err && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
  set_tests_properties(weft_generate_tensor_parallel_kv_compress PROPERTIES TIMEOUT 120
    PASS_REGULAR_EXPRESSION "[1-9][0-9]* KV pages freed")
  set(kvc_bench "bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu --threads 1 --num-requests 4 --input-len 80 --output-len 4 --kv-compress-rate 0.5")
  add_test(NAME weft_bench_tensor_parallel_kv_compress
           COMMAND sh -c "one=$($<TARGET_FILE:weft> ${kvc_bench} | grep -o 'output_digest\":\"[0-9a-f]*') && out=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${kvc_bench} --tensor-parallel 2 | tail -1) && two=$(echo \"$out\" | grep -o 'output_digest\":\"[0-9a-f]*') && echo \"$out\" | grep -o '\"kv_compressions\":4,\"kv_compressed_pages\":8' && echo \"one: $one tp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
  set_tests_properties(weft_bench_tensor_parallel_kv_compress PROPERTIES TIMEOUT 180
    PASS_REGULAR_EXPRESSION "kv_compressions.:4,.kv_compressed_pages.:8")
  # --quantize reaches the follower too: one process's output digest in q4_b32 (16 tokens a
  # request, where q4_b32's digest differs from the unquantized model's).
  set(q_bench "bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cpu --threads 1 --num-requests 4 --input-len 80 --output-len 16 --quantize q4_b32")
  add_test(NAME weft_bench_tensor_parallel_quantized
           COMMAND sh -c "one=$($<TARGET_FILE:weft> ${q_bench} | grep -o 'output_digest\":\"[0-9a-f]*') && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${q_bench} --tensor-parallel 2 | grep -o 'output_digest\":\"[0-9a-f]*') && echo \"one: $one tp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
  set_tests_properties(weft_bench_tensor_parallel_quantized PROPERTIES TIMEOUT 180)
  # Pipelines are refused by name, and the follower stops with the leader (no hang).
  add_test(NAME weft_bench_pipeline_parallel_kv_compress_refused
           COMMAND ${tp_launch} -np 2 $<TARGET_FILE:weft> bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny
                   --device cpu --threads 1 --num-requests 2 --input-len 80 --output-len 4
                   --kv-compress-rate 0.5 --pipeline-parallel 2)
  set_tests_properties(weft_bench_pipeline_parallel_kv_compress_refused PROPERTIES TIMEOUT 60
    PASS_REGULAR_EXPRESSION "weft bench: kv_compress_rate > 0: not with pipeline parallelism so far")
endif()

# weft serve leading a group of two ranks: a greedy completion over HTTP equals weft generate.
if(WEFT_HAVE_MPI AND WEFT_MPIEXEC)
  add_test(NAME weft_serve_tensor_parallel
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gateway/tensor_parallel_serve.sh $<TARGET_FILE:weft>
                   ${CMAKE_SOURCE_DIR}/models/weft-tiny ${tp_launch})
  set_tests_properties(weft_serve_tensor_parallel PROPERTIES TIMEOUT 180
    PASS_REGULAR_EXPRESSION "tensor-parallel serve ok" FAIL_REGULAR_EXPRESSION "FAIL")
  add_test(NAME weft_serve_pipeline_parallel
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gateway/tensor_parallel_serve.sh $<TARGET_FILE:weft>
                   ${CMAKE_SOURCE_DIR}/models/weft-tiny ${tp_launch})
  set_tests_properties(weft_serve_pipeline_parallel PROPERTIES TIMEOUT 180
    ENVIRONMENT "WEFT_SERVE_PARALLEL=--pipeline-parallel 2"
    PASS_REGULAR_EXPRESSION "tensor-parallel serve ok" FAIL_REGULAR_EXPRESSION "FAIL")
endif()

# On two GPUs (NCCL): weft generate split over GPU 0 and GPU 1 gives one GPU's greedy tokens on
# every fixture model, and weft bench leads a group of two GPU ranks. Skipped (exit 77) where
# fewer than two GPUs are visible.
if(WEFT_HAVE_NCCL AND WEFT_MPIEXEC)
  set(tp_two_gpus "[ \"$(nvidia-smi -L 2>/dev/null | grep -c ^GPU)\" -ge 2 ] || { echo 'SKIP: needs two GPUs'; exit 77; }")
  foreach(dir ${tp_fixtures})
    if(NOT EXISTS ${dir}/config.json)
      continue()
    endif()
    get_filename_component(name ${dir} NAME)
    set(tp_args "generate --model ${dir} --prompt-ids 5,17,42,99,3,201,64 --max-tokens 8 --ignore-eos --device cuda")
    add_test(NAME weft_generate_tensor_parallel_cuda_${name}
             COMMAND sh -c "${tp_two_gpus}; one=$($<TARGET_FILE:weft> ${tp_args} 2>/dev/null) && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${tp_args} --tensor-parallel 2 2>/dev/null) && echo \"tp1: $one\" && echo \"tp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
    set_tests_properties(weft_generate_tensor_parallel_cuda_${name} PROPERTIES TIMEOUT 180
                         SKIP_RETURN_CODE 77)
  endforeach()
  add_test(NAME weft_bench_tensor_parallel_cuda
           COMMAND sh -c "${tp_two_gpus}; ${tp_launch_text} -np 2 $<TARGET_FILE:weft> bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cuda --tensor-parallel 2 --num-requests 8 --input-len 16 --output-len 8")
  set_tests_properties(weft_bench_tensor_parallel_cuda PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77
    PASS_REGULAR_EXPRESSION "requests 8 \\(0 failed\\)")
  # KV-Compress and quantized weights on GPU ranks: one GPU's text (the CPU CTests' twins).
  set(kvc_cuda "generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cuda --prompt 'The whale, the sea and the ship were all that the men of the Pequod knew for three long years, and the captain' --max-tokens 12 --ignore-eos --kv-compress-rate 0.5 --kv-compress-window 4 --page-size 4")
  add_test(NAME weft_generate_tensor_parallel_cuda_kv_compress
           COMMAND sh -c "${tp_two_gpus}; one=$($<TARGET_FILE:weft> ${kvc_cuda} 2>/dev/null) && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${kvc_cuda} --tensor-parallel 2 2>${CMAKE_CURRENT_BINARY_DIR}/tp_cuda_kv_compress.err) && echo \"tp1: $one\" && echo \"tp2: $two\" && grep 'KV pages freed' ${CMAKE_CURRENT_BINARY_DIR}/tp_cuda_kv_compress.err && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
  set_tests_properties(weft_generate_tensor_parallel_cuda_kv_compress PROPERTIES TIMEOUT 180
    SKIP_RETURN_CODE 77 PASS_REGULAR_EXPRESSION "[1-9][0-9]* KV pages freed")
  set(q_cuda "generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cuda --prompt-ids 5,17,42,99,3,201,64 --max-tokens 12 --ignore-eos --quantize q8_b32")
  add_test(NAME weft_generate_tensor_parallel_cuda_quantized
           COMMAND sh -c "${tp_two_gpus}; one=$($<TARGET_FILE:weft> ${q_cuda} 2>/dev/null) && two=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${q_cuda} --tensor-parallel 2 2>/dev/null) && echo \"tp1: $one\" && echo \"tp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
  set_tests_properties(weft_generate_tensor_parallel_cuda_quantized PROPERTIES TIMEOUT 180
                       SKIP_RETURN_CODE 77)
  # The LL exchange and the products' pushes into it (weft-tiny's 384-wide rows take them in
  # decode steps): the same tokens as the fused kernel pushing and as the LSA barrier, which
  # are the same sums bit for bit (one GPU's tokens are the fixtures' CTests' above).
  set(llp_cuda "generate --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cuda --prompt-ids 5,17,42,99,3,201,64 --max-tokens 16 --ignore-eos")
  add_test(NAME weft_generate_tensor_parallel_cuda_ll_push
           COMMAND sh -c "${tp_two_gpus}; pushed=$(${tp_launch_text} -np 2 $<TARGET_FILE:weft> ${llp_cuda} --tensor-parallel 2 2>/dev/null) && fused=$(WEFT_TP_FUSED_PUSH=0 ${tp_launch_text} -x WEFT_TP_FUSED_PUSH -np 2 $<TARGET_FILE:weft> ${llp_cuda} --tensor-parallel 2 2>/dev/null) && barrier=$(WEFT_TP_FUSED_LL_ROWS=0 ${tp_launch_text} -x WEFT_TP_FUSED_LL_ROWS -np 2 $<TARGET_FILE:weft> ${llp_cuda} --tensor-parallel 2 2>/dev/null) && echo \"pushed: $pushed\" && echo \"fused kernel: $fused\" && echo \"barrier: $barrier\" && [ -n \"$pushed\" ] && [ \"$pushed\" = \"$fused\" ] && [ \"$pushed\" = \"$barrier\" ]")
  set_tests_properties(weft_generate_tensor_parallel_cuda_ll_push PROPERTIES TIMEOUT 240
                       SKIP_RETURN_CODE 77)
  # GPU pipeline stages (nccl_pipeline.hpp): --pipeline-parallel 2 on GPUs 0 and 1, the stages
  # joined over NCCL (WEFT_PP_TRANSPORT=nccl: an error instead of the host path), gives one
  # GPU's greedy tokens on every fixture model; so do two ranks on one GPU (CUDA_VISIBLE_DEVICES
  # =0: NCCL takes one rank per GPU, so the stages agree on the host path), which needs only
  # one GPU. weft bench behind the engine: the same output digest as one GPU, and every request
  # finishing with two micro-batches in each decode step (WEFT_PP_MICRO_TOKENS=1).
  set(pp_one_gpu "[ \"$(nvidia-smi -L 2>/dev/null | grep -c ^GPU)\" -ge 1 ] || { echo 'SKIP: needs a GPU'; exit 77; }")
  foreach(dir ${tp_fixtures})
    if(NOT EXISTS ${dir}/config.json)
      continue()
    endif()
    get_filename_component(name ${dir} NAME)
    set(pp_args "generate --model ${dir} --prompt-ids 5,17,42,99,3,201,64 --max-tokens 8 --ignore-eos --device cuda")
    add_test(NAME weft_generate_pipeline_parallel_cuda_${name}
             COMMAND sh -c "${tp_two_gpus}; export WEFT_PP_TRANSPORT=nccl; one=$($<TARGET_FILE:weft> ${pp_args} 2>/dev/null) && two=$(${tp_launch_text} -np 2 -x WEFT_PP_TRANSPORT $<TARGET_FILE:weft> ${pp_args} --pipeline-parallel 2) && echo \"one gpu: $one\" && echo \"pp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
    add_test(NAME weft_generate_pipeline_parallel_one_gpu_${name}
             COMMAND sh -c "${pp_one_gpu}; export CUDA_VISIBLE_DEVICES=0; one=$($<TARGET_FILE:weft> ${pp_args} 2>/dev/null) && two=$(${tp_launch_text} -np 2 -x CUDA_VISIBLE_DEVICES $<TARGET_FILE:weft> ${pp_args} --pipeline-parallel 2) && echo \"one gpu: $one\" && echo \"pp2 on one gpu: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
    set_tests_properties(weft_generate_pipeline_parallel_cuda_${name}
                         weft_generate_pipeline_parallel_one_gpu_${name} PROPERTIES
                         TIMEOUT 180 SKIP_RETURN_CODE 77)
  endforeach()
  set(pp_bench "bench --model ${CMAKE_SOURCE_DIR}/models/weft-tiny --device cuda --num-requests 8 --input-len 16 --output-len 8 --gpu-memory-fraction 0.3")
  add_test(NAME weft_bench_pipeline_parallel_cuda
           COMMAND sh -c "${tp_two_gpus}; export WEFT_PP_TRANSPORT=nccl; one=$($<TARGET_FILE:weft> ${pp_bench} | grep -o 'output_digest\":\"[0-9a-f]*') && two=$(${tp_launch_text} -np 2 -x WEFT_PP_TRANSPORT $<TARGET_FILE:weft> ${pp_bench} --pipeline-parallel 2 --pp-groups 1 | grep -o 'output_digest\":\"[0-9a-f]*') && echo \"one gpu: $one\" && echo \"pp2: $two\" && [ -n \"$one\" ] && [ \"$one\" = \"$two\" ]")
  add_test(NAME weft_bench_pipeline_parallel_cuda_micro_batches
           COMMAND sh -c "${tp_two_gpus}; export WEFT_PP_TRANSPORT=nccl WEFT_PP_MICRO_TOKENS=1; ${tp_launch_text} -np 2 -x WEFT_PP_TRANSPORT -x WEFT_PP_MICRO_TOKENS $<TARGET_FILE:weft> ${pp_bench} --pipeline-parallel 2 --micro-batches 2")
  # Sequence groups in flight over NCCL (rank 0 defers each step's logits): every request
  # finishes and both groups' steps were in flight together. (Not compared with one GPU's
  # digest: which requests share a step depends on when they arrive, and a GPU's bf16 products
  # may round a row differently in a batch of another size.)
  # On by default over GPU stages since the hang was fixed (WEFT_PP_GROUPS_GPU=0 turns them off;
  # docs/parallel.md); set here anyway, so the test also says what it needs.
  add_test(NAME weft_bench_pipeline_parallel_cuda_groups
           COMMAND sh -c "${tp_two_gpus}; export WEFT_PP_TRANSPORT=nccl WEFT_PP_GROUPS_GPU=1; ${tp_launch_text} -np 2 -x WEFT_PP_TRANSPORT -x WEFT_PP_GROUPS_GPU $<TARGET_FILE:weft> ${pp_bench} --pipeline-parallel 2 --pp-groups 2")
  set_tests_properties(weft_bench_pipeline_parallel_cuda weft_bench_pipeline_parallel_cuda_micro_batches
                       weft_bench_pipeline_parallel_cuda_groups
                       PROPERTIES TIMEOUT 180 SKIP_RETURN_CODE 77)
  set_tests_properties(weft_bench_pipeline_parallel_cuda_micro_batches PROPERTIES
                       PASS_REGULAR_EXPRESSION "requests 8 \\(0 failed\\)")
  set_tests_properties(weft_bench_pipeline_parallel_cuda_groups PROPERTIES
                       PASS_REGULAR_EXPRESSION "requests 8 \\(0 failed\\).*steps_in_flight_peak\":2")
  # Hybrid on GPUs: two stages of two tensor-parallel ranks (4 processes: on 2 GPUs two per GPU,
  # each stage's NCCL group over GPUs 0 and 1; on 4 GPUs one each) give the tokens of TP=2 alone
  # (the same shards and all-reduces; the stages only hand the fp32 residual stream on), with
  # the collectives' buffers plain and in NCCL symmetric windows.
  foreach(buffers plain symmetric)
    set(hy_args "generate --model ${fixture_models}/llama_gqa_f32 --prompt-ids 5,17,42,99,3,201,64 --max-tokens 8 --ignore-eos --device cuda")
    add_test(NAME weft_generate_tensor_pipeline_hybrid_cuda_${buffers}
             COMMAND sh -c "${tp_two_gpus}; export WEFT_TP_NCCL_BUFFERS=${buffers}; two=$(${tp_launch_text} -np 2 -x WEFT_TP_NCCL_BUFFERS $<TARGET_FILE:weft> ${hy_args} --tensor-parallel 2 2>/dev/null) && four=$(${tp_launch_text} -np 4 -x WEFT_TP_NCCL_BUFFERS $<TARGET_FILE:weft> ${hy_args} --tensor-parallel 2 --pipeline-parallel 2 --micro-batches 2) && echo \"tp2: $two\" && echo \"tp2 x pp2: $four\" && [ -n \"$two\" ] && [ \"$two\" = \"$four\" ]")
    set_tests_properties(weft_generate_tensor_pipeline_hybrid_cuda_${buffers} PROPERTIES
                         TIMEOUT 180 SKIP_RETURN_CODE 77)
  endforeach()
endif()
