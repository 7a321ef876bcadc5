#pragma once
// Tensor parallelism's all-reduce fused with the residual add and the norm that follow it
// (TensorRT-LLM's one-shot all-reduce + residual + RMSNorm for small batches), with NCCL's
// device API as the engine: every rank's row-parallel product writes its partial rows into a
// symmetric window (ncclCommWindowRegister); one kernel waits at an NCCL LSA barrier (release
// then acquire, across the GPUs), reads every rank's partial rows through the window's
// load/store pointers, sums them in rank order (so every rank holds bitwise the same sum), and
// does what cuda::add_norm does with that sum as its delta. docs/parallel.md, "Fused
// all-reduce and norm".
//
// Built only where the CUDA toolkit has NCCL 2.28's device headers (nccl_device.h):
// tp_fused_built() says whether this binary has the kernels; without them every launch
// returns false and the caller keeps NCCL's all-reduce.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/ll_push.hpp"
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/precision.hpp"

namespace weft::cuda {

// What the kernels need of the group, from Communicator::device_reduce_window: the device
// communicator (an ncclDevComm, copied into each launch's parameters), the window, and the
// LSA barriers (an ncclLsaBarrierHandle: resource buffer and count). Blocks b of one launch
// use barrier b, so a launch has at most `barriers` rows.
struct TpFusedGroup {
  const void* dev_comm = nullptr;  // ncclDevComm, host memory owned by the communicator
  void* window = nullptr;          // ncclWindow_t
  std::uint32_t barrier_buffer = 0;
  int barriers = 0;
  int rank = 0;
  int ranks = 0;
  // The LL exchange (tp_fused.cu): launches of up to ll_rows rows no wider than ll_width
  // floats (and on the float4 kernel's shapes: n % 128 == 0, n <= 4096) skip the barrier; each
  // rank stores its partial rows, flagged with the launch's epoch, straight into the peers'
  // receive areas at byte ll_offset of the window (tp_fused_ll_bytes(ranks, ll_rows, ll_width)
  // bytes, zeroed before the first launch; its last part holds ll_epochs, this rank's
  // counters, a device pointer into it). ll_rows 0: every launch meets at the barrier.
  std::size_t ll_offset = 0;
  int ll_rows = 0;
  int ll_width = 0;
  unsigned* ll_epochs = nullptr;
  // Every rank's receive area as this GPU addresses it (tp_fused_enable_push), for products
  // that push their rows themselves (ll_push.hpp); null until then.
  char* ll_area[kLlMaxRanks] = {};
};

struct AllReduceNormArgs {
  TpFusedGroup group;
  // Byte offset within the window of this launch's partial rows: [rows, n] fp32 on every rank.
  std::size_t offset = 0;
  int rows = 0;
  int n = 0;
  // add_norm's arguments (norm.hpp) with the group's sum as the delta. Null `residual`: only
  // the sum is written, into `sum_out` ([rows, n] fp32, this rank's memory).
  float* residual = nullptr;
  const float* delta_bias = nullptr;
  NormKind kind = NormKind::kRms;
  const float* weight = nullptr;
  const float* bias = nullptr;
  float eps = 1e-5f;
  void* out = nullptr;
  Precision precision = Precision::kBF16;
  float* sum_out = nullptr;
  // The product before stored this rank's rows into the peers' LL receive areas itself (it
  // was given tp_fused_push(group)): the kernel only waits for the peers' rows. Only for
  // launches that take the LL exchange (rows <= group.ll_rows, the float4 kernel's shapes);
  // others are refused.
  bool pushed = false;
};

// Whether this binary has the kernels (built against NCCL's device headers), and their NCCL
// header version (NCCL_VERSION_CODE, e.g. 22809; 0 without them).
bool tp_fused_built() noexcept;
int tp_fused_header_version() noexcept;

// Bytes of the LL receive area for `ranks` ranks, `rows` rows of `width` floats: the lines,
// then the epoch counters at byte tp_fused_ll_bytes(...) - round16(rows * 4) of the area. 0
// without the kernels.
std::size_t tp_fused_ll_bytes(int ranks, int rows, int width) noexcept;

// Gives `group` the LL exchange for launches of up to `rows` rows of at most `width` floats,
// its receive area at byte `offset` of this rank's part of the window, `local` (at least
// tp_fused_ll_bytes(group.ranks, rows, width) bytes from there): zeroes the area, waits for
// that, and fills the ll_* fields. False, `group` unchanged, without the kernels or where the
// area could not be cleared. Every rank of the group must end with the same ll_rows.
bool tp_fused_enable_ll(TpFusedGroup& group, void* local, std::size_t offset, int rows, int width);

// Lets products push into the LL exchange of a group that has it (tp_fused_enable_ll): finds
// every rank's receive area as this GPU addresses it (a kernel on `stream`, waited for) and
// keeps them in group.ll_area. False, `group` unchanged, without the LL exchange or the kernels.
bool tp_fused_enable_push(TpFusedGroup& group, cudaStream_t stream);

// The push of a group whose products may push (tp_fused_enable_push), for gemv's `push`
// argument; an empty one (LlPush::takes nothing) otherwise.
LlPush tp_fused_push(const TpFusedGroup& group) noexcept;

// sizeof(ncclDevComm) in the headers the kernels were built with (0 without them): the
// communicator allocates at least this much for ncclDevCommCreate's output.
std::size_t tp_fused_dev_comm_bytes() noexcept;

// Enqueues the fused kernel on `stream` (capturable in a CUDA graph). Every rank of the group
// must make the same launches in the same order with the same rows. Returns false, enqueuing
// nothing, when it cannot run these arguments (not built, rows beyond the barriers, a null
// weight with a norm asked for, or a row wider than the GPU's shared memory per block). Given
// NCCL's sum of two ranks, the sums and residuals equal add_norm's bitwise and the normalized rows
// are within one ulp (the same arithmetic in the same order; the compiler may contract an FMA
// differently in the two kernels). With more ranks the order of the sum may differ from NCCL's.
bool allreduce_add_norm(const AllReduceNormArgs& args, cudaStream_t stream);

// A check of the group before any barrier is used (run once, outside graphs): writes into
// `pointers` (host-visible device memory, ranks + 3 entries) the window's local pointer, its
// load/store pointer for each rank, the barriers' resource buffer pointer, and 1 when the
// resource window as the device sees it matches the communicator's copy (else 0); into
// `values` (ranks entries) the float at byte `offset` of each rank's window. False when not
// built.
bool tp_fused_probe(const TpFusedGroup& group, std::size_t offset, std::uint64_t* pointers,
                    float* values, cudaStream_t stream);

}  // namespace weft::cuda
