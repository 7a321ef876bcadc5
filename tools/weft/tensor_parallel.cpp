#include "tools/weft/tensor_parallel.hpp"

#include <csignal>
#include <iostream>

#include "actors/device_backend.hpp"
#include "actors/pipeline_stages.hpp"
#include "kernels/cpu/quant/format.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/parallel/step_broadcast.hpp"
#include "tools/weft/pipeline_options.hpp"

namespace weft::cli {

TensorParallelStart start_tensor_parallel(const std::string& command, int ranks,
                                          const EngineConfig& config) {
  TensorParallelStart start;
  // With --pipeline-parallel M the group is M stages of `ranks` each (docs/parallel.md).
  const int stages = config.pipeline_parallel;
  if (ranks * stages <= 1) return start;
  auto fail = [&](const std::string& message) {
    std::cerr << "weft " << command << ": " << message << '\n';
    start.exit_code = 1;
    return start;
  };
  auto world = parallel::mpi_world();
  if (!world) {
    return fail(std::string(stages > 1 ? "--pipeline-parallel: " : "--tensor-parallel: ") +
                world.error().what());
  }
  std::shared_ptr<parallel::Communicator> group = std::move(world.value());
  if (group->size() != ranks * stages) {
    if (group->rank() != 0) {
      start.exit_code = 1;  // every rank sees this; rank 0 says it
      return start;
    }
    return fail(wrong_process_count(command, ranks, stages, group->size()));
  }
  if (group->rank() == 0) {
    start.group = std::move(group);
    return start;
  }
  // A follower: its shard, then the leader's steps. A failure here would leave the leader
  // waiting in a collective, so it ends every rank. On Ctrl-C mpirun sends SIGTERM to every
  // rank; rank 0's engine then shuts down and stops the followers, so a follower waits for
  // that instead (mpirun still kills it with SIGKILL if rank 0 never does).
  std::signal(SIGINT, SIG_IGN);
  std::signal(SIGTERM, SIG_IGN);
  const int rank = group->rank();
  auto abort_all = [&](const std::string& message) {
    std::cerr << "weft " << command << ": rank " << rank << ": " << message << '\n';
    parallel::mpi_abort_world(1);
    return fail(message);
  };
  LoadOptions options;
  options.spec_file = config.spec_file;
  // The leader's --quantize: every rank quantizes its own shard alike (model_loader).
  if (!config.quantize.empty()) {
    auto type = quant::parse_quant_type(config.quantize);
    if (!type) return abort_all(std::string("--quantize: ") + type.error().what());
    options.quantize = *type;
  }
  options.tensor_parallel_size = ranks;
  options.tensor_parallel_rank = rank % ranks;
  options.pipeline_parallel_size = stages;
  options.pipeline_stage = rank / ranks;
  auto loaded = load_model(config.model_dir, options);
  if (!loaded) return abort_all(loaded.error().what());
  auto device = actors::parse_device(config.device);
  if (!device) return abort_all(device.error().what());
  device = actors::tensor_parallel_device(*device, rank);
  if (!device) return abort_all(device.error().what());
  auto layout = loaded->model.kv_layout(config.page_size);
  // The same KV element type as the leader's pool.
  auto kv_dtype = actors::resolve_kv_cache_dtype(config.kv_cache_dtype, *device);
  if (!kv_dtype) return abort_all(kv_dtype.error().what());
  layout.dtype = *kv_dtype;
  // The leader's step budget (0 is 512 per GPU of the group), for this rank's step buffers.
  const int step_tokens = config.step_token_budget(device->cuda, ranks);
  auto followed = parallel::follow_tensor_parallel_leader(
      *group,
      [&](int num_pages) -> Result<std::unique_ptr<model::ForwardBackend>> {
        if (stages > 1) {
          actors::StageOptions stage_options;
          stage_options.num_pages = num_pages;
          stage_options.cpu_threads = config.cpu_threads;
          stage_options.max_tokens_per_step = step_tokens;
          stage_options.gpu_memory_fraction = config.gpu_memory_fraction;
          return actors::make_pipeline_rank_backend(
              loaded->model, *device, layout, stage_options, *group,
              parallel::pipeline_place(rank, ranks, stages),
              config.micro_batches > 0 ? config.micro_batches : stages,
              actors::pipeline_groups(stages, config.pp_groups, device->cuda));
        }
        // The leader's page count, on the CPU or on this rank's GPU alike.
        return actors::make_tensor_parallel_shard(loaded->model, *device, layout, num_pages,
                                                  config.cpu_threads, step_tokens,
                                                  config.gpu_memory_fraction, *group);
      },
      actors::pipeline_groups(stages, config.pp_groups, device->cuda) > 1);
  if (!followed) return abort_all(followed.error().what());
  start.exit_code = 0;
  return start;
}

void add_tensor_parallel_option(CLI::App* cmd, int& ranks) {
  cmd->add_option("--tensor-parallel", ranks,
                  "split the model over N processes started by mpirun -np N (Megatron layout: "
                  "heads and MLP split per rank; rank 0 runs the engine; on the CPU over MPI, "
                  "on GPUs over NCCL with one GPU per rank, the local rank's; docs/parallel.md)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
}

}  // namespace weft::cli
