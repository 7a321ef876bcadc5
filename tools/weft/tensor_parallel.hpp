#pragma once
// --tensor-parallel N for the engine commands (serve, bench), docs/parallel.md: N processes
// started by `mpirun -np N`. Rank 0 runs the command with an engine that leads the group;
// the other ranks load their shard and follow the leader's steps until its engine stops.

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>

#include "weft/engine.hpp"

namespace weft::cli {

struct TensorParallelStart {
  // Rank 0: the group, for EngineConfig::tensor_parallel (null when N is 1).
  std::shared_ptr<parallel::Communicator> group;
  // Set when this process is done: a follower that finished, or a launch that failed (the
  // message already printed as "weft <command>: ...").
  std::optional<int> exit_code;
};

// `config` is what rank 0's engine will use (model_dir, spec_file, page_size, cpu_threads).
TensorParallelStart start_tensor_parallel(const std::string& command, int ranks,
                                          const EngineConfig& config);

void add_tensor_parallel_option(CLI::App* cmd, int& ranks);

}  // namespace weft::cli
