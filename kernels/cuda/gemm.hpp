#pragma once
// Dense products against weight matrices stored as Hugging Face Linear layers ([out, in],
// row-major) through cuBLAS: 16-bit inputs, fp32 compute, fp32 output (the following kernel
// adds the bias and rounds, so nothing is rounded twice). Optionally, products of few tokens
// go to the streaming kernel of gemv.hpp instead (set_gemv_max_tokens).

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/precision.hpp"

struct cublasContext;

namespace weft::cuda {

// One cuBLAS handle, bound to a stream per call. Not thread-safe: one per executor.
class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;

  // Products of 1..tokens tokens (at most kGemvMaxTokens) go to cuda::gemv instead of
  // cuBLAS; 0 (the default): none. gemv is faster at one token, slower from about 8, and
  // sums in another order than cuBLAS: a row's result then depends on how many rows its
  // product has, so a model using it is no longer batch invariant bit for bit.
  void set_gemv_max_tokens(int tokens) noexcept;

  // Empty when the handle was made; else why not (no device, out of memory, ...).
  const std::string& error() const noexcept { return error_; }

  // y[t, o] = sum_k x[t, k] * w[o, k] for t < tokens; x is [tokens, in] and w [out, in] in
  // `precision`, y is [tokens, out] fp32 with row stride ldy (>= out; lets several products
  // write column ranges of one output). Returns false on a cuBLAS error; a failed launch of
  // the small-step kernel shows in cudaGetLastError.
  bool linear(const void* x, int tokens, const void* w, int out_features, int in_features, float* y,
              int ldy, Precision precision, cudaStream_t stream);

  // The same product through cuBLAS, with y in `precision` (rounded once, from the fp32
  // sums), for consumers that read 16 bits anyway; never the small-step kernel.
  bool linear16(const void* x, int tokens, const void* w, int out_features, int in_features,
                void* y, int ldy, Precision precision, cudaStream_t stream);

  // Whether a product of `tokens` rows may go to the small-step kernel (fp32 output only).
  bool small_step(int tokens) const noexcept { return tokens <= gemv_max_tokens_; }

 private:
  cublasContext* handle_ = nullptr;
  void* workspace_ = nullptr;  // set explicitly, so products can be captured in CUDA graphs
  int gemv_max_tokens_ = 0;    // products of up to this many tokens go to cuda::gemv
  std::string error_;
};

}  // namespace weft::cuda
