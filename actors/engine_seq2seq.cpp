#include "actors/engine_seq2seq.hpp"

#include <algorithm>
#include <string>

#include "runtime/model/seq2seq_backend.hpp"
#include "weft/log.hpp"

#if WEFT_HAVE_CUDA
#include "kernels/cuda/seq2seq.hpp"
#include "runtime/model/cuda/cuda_seq2seq_backend.hpp"
#endif

namespace weft::actors {

Result<void> check_seq2seq_config(const EngineConfig& c) {
  auto refuse = [](const std::string& what) {
    return Error(ErrorCode::kUnsupported,
                 what + " is not implemented for encoder-decoder models yet (docs/seq2seq.md)");
  };
  if (!c.speculate.empty()) return refuse("speculative decoding (speculate)");
  if (c.kv_compress_rate > 0.0) return refuse("KV-Compress (kv_compress_rate)");
  if (!c.quantize.empty()) return refuse("quantize");
  if (c.tensor_parallel != nullptr || c.pipeline_parallel > 1) {
    return refuse("tensor or pipeline parallelism");
  }
  if (c.cpu_layers > 0 || c.gpu_memory_budget_mb > 0) {
    return refuse("the GPU/CPU hybrid (cpu_layers, gpu_memory_budget_mb)");
  }
  if (c.make_backend) return refuse("make_backend");
  return {};
}

Result<std::unique_ptr<model::ForwardBackend>> make_seq2seq_backend(
    const model::Seq2SeqModel& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, int max_tokens_per_step, double gpu_memory_fraction) {
  if (!device.cuda) {
    return std::unique_ptr<model::ForwardBackend>(
        std::make_unique<model::CpuSeq2SeqBackend>(model, layout, num_pages, cpu_threads));
  }
#if WEFT_HAVE_CUDA
  model::CudaSeq2SeqBackendOptions options;
  options.device = device.index;
  options.num_pages = num_pages;
  options.gpu_memory_fraction = gpu_memory_fraction;
  options.max_tokens_per_step = max_tokens_per_step;
  auto gpu = model::CudaSeq2SeqBackend::create(model, layout, options);
  if (!gpu) return gpu.error();
  log_info("engine: encoder-decoder model on " + gpu.value()->describe());
  return std::unique_ptr<model::ForwardBackend>(std::move(gpu.value()));
#else
  (void)max_tokens_per_step;
  (void)gpu_memory_fraction;
  return Error(ErrorCode::kUnsupported,
               "device cuda:" + std::to_string(device.index) +
                   ": this Weft was built without CUDA (configure with WEFT_CUDA=ON)");
#endif
}

int seq2seq_max_positions(const DeviceChoice& device) {
#if WEFT_HAVE_CUDA
  if (device.cuda) return cuda::kSeq2SeqMaxKeys;
#endif
  (void)device;
  return 0;
}

Result<void> check_seq2seq_lengths(int max_positions, std::size_t source_tokens,
                                   std::size_t decoder_prompt_tokens, int max_tokens) {
  if (max_positions <= 0) return {};
  const auto limit = static_cast<std::size_t>(max_positions);
  if (source_tokens > limit) {
    return Error(ErrorCode::kInvalidArgument,
                 "prompt: " + std::to_string(source_tokens) + " tokens is more than the " +
                     std::to_string(limit) +
                     " an encoder-decoder model's source may have on the GPU");
  }
  if (decoder_prompt_tokens + static_cast<std::size_t>(std::max(0, max_tokens)) > limit) {
    return Error(ErrorCode::kInvalidArgument,
                 "max_tokens: " + std::to_string(max_tokens) + " after " +
                     std::to_string(decoder_prompt_tokens) +
                     " decoder prompt tokens is more than the " + std::to_string(limit) +
                     " decoder positions an encoder-decoder model may have on the GPU; at most " +
                     std::to_string(limit - std::min(limit, decoder_prompt_tokens)));
  }
  return {};
}

Result<std::vector<std::int32_t>> seq2seq_decoder_prompt(const model::Seq2SeqModel& model,
                                                         const std::vector<std::int32_t>& prefix) {
  const int vocab = model.spec().vocab_size;
  std::vector<std::int32_t> prompt{model.decoder_start_token_id()};
  for (const std::int32_t id : prefix) {
    if (id < 0 || id >= vocab) {
      return Error(ErrorCode::kInvalidArgument, "decoder_prefix_ids: " + std::to_string(id) +
                                                    " is outside the vocabulary [0, " +
                                                    std::to_string(vocab) + ")");
    }
    prompt.push_back(id);
  }
  return prompt;
}

}  // namespace weft::actors
