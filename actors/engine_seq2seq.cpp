#include "actors/engine_seq2seq.hpp"

#include <string>

#include "runtime/model/seq2seq_backend.hpp"
#include "weft/log.hpp"

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

Result<DeviceChoice> seq2seq_device(const EngineConfig& config, const DeviceChoice& parsed) {
  if (!parsed.cuda) return parsed;
  if (config.device == "auto") {
    log_info("engine: encoder-decoder models run on the CPU so far; using it");
    return DeviceChoice{};
  }
  return Error(ErrorCode::kUnsupported,
               "device: encoder-decoder models run on the CPU only so far; use \"cpu\" (or "
               "\"auto\"), not \"" +
                   config.device + "\"");
}

std::unique_ptr<model::ForwardBackend> make_seq2seq_backend(const model::Seq2SeqModel& model,
                                                            const model::KvLayout& layout,
                                                            int num_pages, unsigned cpu_threads) {
  return std::make_unique<model::CpuSeq2SeqBackend>(model, layout, num_pages, cpu_threads);
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
