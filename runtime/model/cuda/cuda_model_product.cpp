// CudaModel::State::step_product: how a step multiplies its rows by one weight matrix (the
// quantized products, dequantized chunks through cuBLAS, the row kernel for decode rows, or
// cuBLAS), for enqueue_step (cuda_model_enqueue.cpp).

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "kernels/cuda/gemv_rows.hpp"
#include "kernels/cuda/quant_gemv.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"

namespace weft::model {

bool CudaModel::State::rounded_dp4a(int tokens) const {
  static const bool on = [] {
    const char* v = std::getenv("WEFT_QUANT_DP4A_ROUNDED");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  // From 5 tokens: at 8 it took an 8B q4 step from 5.66-5.69 to 5.12-5.14 ms on an H100, at 4
  // it was level with the stream kernel or 2% slower (docs/PERFORMANCE.md, "Where a q4
  // batch-1 step's time goes").
  return on && quant_format && tokens >= 5 && tokens <= cuda::kQuantGemvMaxTokens &&
         rounded_inputs.get() != nullptr && cuda::quant_gemv_dp4a_supported(*quant_format, 1) &&
         cuda::quant_gemv_default_kernel(tokens) == cuda::QuantGemvKernel::kAuto;
}

bool CudaModel::State::step_product(const PreparedStep& step, const void* in_x, int tokens,
                                    const DeviceBuffer& w16, const DeviceBuffer& wq,
                                    int out_features, int in_features, float* y, int ldy,
                                    bool head) {
  const cuda::Precision P = options.precision;
  if (wq.get() != nullptr && quant_format) {
    const cuda::QuantMatrixView view{wq.get(), *quant_format, out_features, in_features};
    if (tokens <= kQuantChunkedTokens && cuda::quant_gemv_supported(in_x, 1, view)) {
      for (int t0 = 0; t0 < tokens; t0 += cuda::kQuantGemvMaxTokens) {
        const int n = std::min(cuda::kQuantGemvMaxTokens, tokens - t0);
        const void* xt = static_cast<const std::byte*>(in_x) +
                         static_cast<std::size_t>(t0) * in_features * cuda::kHalfBytes;
        float* yt = y + static_cast<std::size_t>(t0) * ldy;
        if (rounded_dp4a(n)) {
          cuda::quant_round_inputs(xt, n, in_features, rounded_inputs.get(), P, stream);
          cuda::quant_gemv_dp4a_rounded(rounded_inputs.get(), n, view, yt, ldy, -1, nullptr, P,
                                        stream);
        } else {
          cuda::quant_gemv(xt, n, view, yt, ldy, P, stream);
        }
      }
      return true;
    }
    const int chunk = static_cast<int>(std::min<std::size_t>(
        dequant_scratch.bytes() / (static_cast<std::size_t>(in_features) * cuda::kHalfBytes),
        static_cast<std::size_t>(out_features)));
    bool ok = chunk > 0;
    for (int r0 = 0; ok && r0 < out_features; r0 += chunk) {
      const int n = std::min(chunk, out_features - r0);
      cuda::quant_dequantize(view, r0, n, dequant_scratch.get(), P, stream);
      ok =
          blas->linear(in_x, tokens, dequant_scratch.get(), n, in_features, y + r0, ldy, P, stream);
    }
    return ok;
  }
  // The decode rows' products through the row kernel (CudaModelOptions::row_kernel_tokens):
  // alone when the step has nothing else, else after cuBLAS has computed every row.
  const bool row_kernel = step.decode_count >= 1 && step.decode_count <= row_kernel_limit(options);
  const int decode_rows = head ? step.head_decode_rows : step.decode_count;
  if (row_kernel && decode_rows > 0 && w16.get() != nullptr &&
      cuda::gemv_rows_supported(in_x, decode_rows, w16.get(), in_features)) {
    if (decode_rows == tokens) {
      cuda::gemv_rows(in_x, tokens, nullptr, w16.get(), out_features, in_features, y, ldy, P,
                      stream);
      return true;
    }
    const bool ok =
        blas->linear(in_x, tokens, w16.get(), out_features, in_features, y, ldy, P, stream);
    const auto* dev = meta.as<std::int32_t>();
    cuda::gemv_rows(in_x, decode_rows, dev + (head ? step.L.head_rows : step.L.row_list), w16.get(),
                    out_features, in_features, y, ldy, P, stream);
    return ok;
  }
  return blas->linear(in_x, tokens, w16.get(), out_features, in_features, y, ldy, P, stream);
}

}  // namespace weft::model
