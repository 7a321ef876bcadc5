#pragma once
// Where a model runs: "auto" (GPU 0 when one is visible, else the CPU), "cpu", "cuda" (GPU 0)
// or "cuda:N", and the forward backend for it (the
// CPU one, or a CudaModel when Weft was built with CUDA). Used by the Engine and by
// `weft generate` so both accept the same --device spellings.

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "runtime/model/encoder_backend.hpp"
#include "runtime/model/forward_backend.hpp"
#include "runtime/model/model.hpp"
#include "runtime/parallel/communicator.hpp"
#include "weft/error.hpp"

namespace weft::actors {

struct DeviceChoice {
  bool cuda = false;
  int index = 0;  // the GPU, when cuda
};

// Errors name the spelling and what is accepted.
Result<DeviceChoice> parse_device(std::string_view text);

// "cpu" or "cuda:N": what "auto" resolved to, for reports.
std::string device_name(const DeviceChoice& device);

// The KV pages' element type --kv-cache-dtype names: "auto" (f32 on the CPU, the model's
// bf16 on a GPU), "f32", "bf16", "fp16", "int8" or "fp8" (e4m3); int8 and fp8 carry a scale
// per (token, kv head) row (kernels/kv_dtype.hpp). A GPU keeps K and V in bf16 (the precision
// it runs in), int8 or fp8; f32 and fp16 are refused there. Errors name the spelling and what
// is accepted.
Result<KvDtype> resolve_kv_cache_dtype(std::string_view text, const DeviceChoice& device);

// The bytes one KV page takes on the device for the layout's dtype (elements and, when
// quantized, their scales), so a byte budget turns into a page count the same way the backend
// will allocate it.
std::size_t kv_page_bytes(const DeviceChoice& device, const model::KvLayout& layout);

// One line for logs: "<pages> pages of <page_size> tokens (<tokens> tokens, <dtype> KV,
// <bytes> bytes a page, <MiB> MiB)".
std::string describe_kv_pool(const model::KvLayout& layout, std::int64_t num_pages);

// `model` must outlive the backend. On a GPU, weights are uploaded in bf16 and the pool holds
// `num_pages` pages, or with num_pages 0 what gpu_memory_fraction of the device leaves (the
// backend's num_pages() says how many); step buffers are sized for max_tokens_per_step tokens.
// `on_progress`, when set, follows the weights' upload to a GPU (bytes done, bytes in all).
Result<std::unique_ptr<model::ForwardBackend>> make_forward_backend(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, int max_tokens_per_step, double gpu_memory_fraction = 0.9,
    std::function<void(std::size_t, std::size_t)> on_progress = {});

// The GPU a tensor-parallel rank runs on: with --device cuda, each process takes the GPU of
// its local rank on its host (Open MPI's OMPI_COMM_WORLD_LOCAL_RANK, else MPI_LOCALRANKID,
// SLURM_LOCALID, else `world_rank`), modulo the GPUs it sees; CUDA_VISIBLE_DEVICES picks
// which. "cuda:N" is refused (one process per GPU: the index would be the same on every
// rank). The CPU stays the CPU.
Result<DeviceChoice> tensor_parallel_device(const DeviceChoice& device, int world_rank);

// A tensor-parallel rank's backend (docs/parallel.md): its shard of `model` (loaded with
// LoadOptions::tensor_parallel_*). On the CPU the all-reduces go over `group` (MPI); on a GPU
// (`device` from tensor_parallel_device) the rank makes an NCCL communicator on the model's
// stream, the unique id carried by `group`. Collective: every rank calls it. `group` must
// outlive the backend.
Result<std::unique_ptr<model::ForwardBackend>> make_tensor_parallel_shard(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, int max_tokens_per_step, double gpu_memory_fraction,
    parallel::Communicator& group, std::function<void(std::size_t, std::size_t)> on_progress = {});

// An encoder-only model's backend: the CPU (cpu_threads threads), or on a GPU the weights
// uploaded in bf16 and step buffers sized for max_tokens_per_step tokens (model::CudaEncoder).
// `model` must outlive the backend.
Result<std::unique_ptr<model::EncoderBackend>> make_encoder_backend(
    const model::EncoderModel& model, const DeviceChoice& device, unsigned cpu_threads,
    int max_tokens_per_step);

// Rank 0's backend in a tensor-parallel group (runtime/parallel/step_broadcast.hpp): its
// shard of `model`, each step also sent to the other ranks (which run
// follow_tensor_parallel_leader, making their backends with make_tensor_parallel_shard and the
// page count this one tells them). On a GPU, num_pages 0 sizes the pool from
// gpu_memory_fraction of the device. On an error the followers still wait for the pool: the
// caller stops them (parallel::stop_tensor_parallel_followers).
Result<std::unique_ptr<model::ForwardBackend>> make_tensor_parallel_leader(
    const model::Model& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, parallel::Communicator& group,
    int max_tokens_per_step = 512, double gpu_memory_fraction = 0.9,
    std::function<void(std::size_t, std::size_t)> on_progress = {});

}  // namespace weft::actors
