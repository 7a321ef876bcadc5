#pragma once
// GPU pipeline stages joined over NCCL (docs/parallel.md, "Pipeline parallelism", "On GPUs"):
// the residual stream goes from a stage's GPU to the next stage's GPU with ncclSend/ncclRecv,
// and the last stage's logits to world rank 0's GPU, device to device, with no host copy on
// the way. MPI keeps the control: the step broadcast (step_broadcast.hpp) and the setup here.
//
// Each link is a two-rank NCCL communicator of its own, bootstrapped over an MPI split of the
// world: stage s -> s + 1 for each tensor-parallel rank (activations), and the last stage's tp
// rank 0 -> world rank 0 (logits). A link runs on a CUDA stream of its own, so a stage
// computes micro-batch i + 1 on its model's stream while micro-batch i is still being sent;
// events order each buffer's writer, sender and reader, and the host waits only on rank 0, for
// the step's logits.
//
// Made only where every rank can open NCCL and no two ranks share a GPU (NCCL refuses two
// ranks of one communicator on one device): otherwise every rank agrees on the host path
// (null), which works anywhere, e.g. two ranks on one GPU for tests. WEFT_PP_TRANSPORT picks:
// auto (default), host (always the host path), nccl (an error where NCCL cannot be used).

#include <memory>

#include "runtime/parallel/pipeline_backend.hpp"

namespace weft::parallel {

// A DeviceLinksFactory (pipeline_backend.hpp): collective over `world` (MPI, host buffers).
Result<std::unique_ptr<DeviceStageLinks>> make_nccl_stage_links(Communicator& world,
                                                                const PipelinePlace& place,
                                                                model::StageForward& stage);

}  // namespace weft::parallel
