#pragma once
// Writes a quantized copy of a model folder (what `weft quantize` does; docs/quantization.md):
// one model.safetensors with the spec's weight matrices as U8 block tensors of [rows,
// row_bytes] and every other tensor as it was, config.json with a "quantization" entry, and
// the tokenizer, chat template and generation files. load_model reads the copy directly.

#include <cstddef>
#include <filesystem>
#include <functional>

#include "kernels/cpu/quant/format.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "loaders/model_loader.hpp"
#include "weft/error.hpp"

namespace weft {

struct QuantizedFolderStats {
  std::size_t tensors = 0;
  std::size_t quantized_tensors = 0;
  std::size_t source_bytes = 0;   // of all tensors, as loaded
  std::size_t written_bytes = 0;  // model.safetensors
};

// `loaded` is `source` loaded unquantized. `out` must not exist or be an empty folder, and
// not be `source`. `progress` (may be empty) gets source bytes done and in all.
Result<QuantizedFolderStats> write_quantized_folder(
    const std::filesystem::path& source, const LoadedModel& loaded, quant::QuantType type,
    const std::filesystem::path& out, cpu::ThreadPool* pool,
    const std::function<void(std::size_t, std::size_t)>& progress);

}  // namespace weft
