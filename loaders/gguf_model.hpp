#pragma once
// Loads a GGUF file (llama.cpp's single-file format) as a Model: the hyperparameters from the
// `llama.*` metadata, the tensors by their GGUF names (token_embd, blk.N.attn_q, ...). F32,
// F16 and BF16 tensors stay zero-copy views into the mapped file; quantized tensors (Q8_0, Q4_0,
// Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K) are dequantized once at load into `dequantize_to`. The Q and
// K projections, which llama.cpp's converter permutes for its interleaved rope, are permuted back,
// so the model computes exactly what the Hugging Face checkpoint does.

#include <filesystem>

#include "loaders/gguf_file.hpp"
#include "loaders/model_loader.hpp"
#include "weft/error.hpp"

namespace weft {

// True when `path` is a regular file named *.gguf or starting with the GGUF magic: the
// loaders that take "a model folder" take such a file instead.
bool is_gguf_file(const std::filesystem::path& path);

struct GgufLoadOptions {
  // What quantized tensors become: kBF16 (the default), kF16 or kF32.
  DType dequantize_to = DType::kBF16;
};

// options.spec_file is ignored (a GGUF file names its architecture); tensor parallelism works
// as for a folder.
Result<LoadedModel> load_gguf_model(const std::filesystem::path& path,
                                    const LoadOptions& options = {},
                                    const GgufLoadOptions& gguf_options = {});

// The spec a GGUF file describes, with GGUF tensor names. Errors name the metadata key.
Result<model::ModelSpec> gguf_model_spec(const gguf::File& file);

// eos (and end-of-turn) ids, bos and pad from the tokenizer.ggml.* metadata.
Result<model::GenerationDefaults> gguf_generation_defaults(const gguf::File& file);

// Row `r` of a Q or K projection as Hugging Face stores it lives at row `gguf_row(r)` of the
// GGUF tensor: within each head of `head_dim` rows, llama.cpp's converter interleaves the two
// halves (row h*D + s*D/2 + i goes to h*D + 2*i + s).
inline std::int64_t gguf_rope_row(std::int64_t hf_row, std::int64_t head_dim) {
  const std::int64_t head = hf_row / head_dim, within = hf_row % head_dim;
  const std::int64_t half = head_dim / 2;
  return head * head_dim + 2 * (within % half) + within / half;
}

}  // namespace weft
