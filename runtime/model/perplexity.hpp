#pragma once
// The perplexity of a model on a token sequence, with a sliding window.
//
// Perplexity is exp of the mean negative log-likelihood of every token but the first, each
// scored once: windows of `window` tokens start every `stride` tokens, and a window scores only
// the tokens after the end of the previous window, so each token is predicted from at least
// window - stride tokens of context (the method of Hugging Face's perplexity guide).
// tools/train/train.py computes PyTorch's figure the same way.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "runtime/kv/kv_compress.hpp"
#include "runtime/model/model.hpp"
#include "weft/error.hpp"

namespace weft::model {

struct PerplexityOptions {
  int window = 512;
  int stride = 256;
  int chunk = 256;  // tokens per forward step: bounds the logits' memory
  int page_size = 16;
  KvDtype kv_dtype = KvDtype::kF32;  // the KV pages' element type (kernels/kv_dtype.hpp)
  // KV-Compress (docs/kv-compress.md): each window's context (the tokens before the first one
  // it scores) is compressed once fed, so its scored tokens see the compressed cache, as a
  // request's output sees its compressed prompt.
  kv::KvCompressConfig kv_compress;
};

struct PerplexityResult {
  double perplexity = 0;
  double mean_nll = 0;
  std::size_t tokens_scored = 0;
};

// `progress(scored, total)` is called after each window.
using PerplexityProgress = std::function<void(std::size_t scored, std::size_t total)>;

Result<PerplexityResult> sliding_window_perplexity(const Model& model,
                                                   std::span<const std::uint32_t> ids,
                                                   const PerplexityOptions& options,
                                                   cpu::ThreadPool& pool,
                                                   const PerplexityProgress& progress = {});

}  // namespace weft::model
