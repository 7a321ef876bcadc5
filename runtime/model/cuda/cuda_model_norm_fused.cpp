// CudaModel::State::norm_fusable: which decode steps run their residual adds and norms inside
// the dp4a products (kernels/cuda/quant_gemv.hpp, QuantNormArgs; docs/quantization.md, "Norms
// inside the products"). enqueue_step (cuda_model_enqueue.cpp) then skips the add_norm after
// each layer's o and down (except the last layer's down, whose add the final norm does): o and
// down add their rows into the residual stream and write it times the next norm's weight, qkv
// and gate_up scale their sums by 1 / rms.

#include <cstdlib>
#include <cstring>

#include "kernels/cuda/quant_gemv.hpp"
#include "runtime/model/cuda/cuda_model_state.hpp"

namespace weft::model {

bool CudaModel::State::norm_fusable(int T) const {
  static const bool on = [] {
    const char* v = std::getenv("WEFT_QUANT_NORM_FUSED");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  if (!on || !quant_format || tensor_parallel != nullptr || layers.empty()) return false;
  if (spec.norm != Norm::kRms || spec.norm_placement == NormPlacement::kPost ||
      spec.parallel_attention || !spec.gated_mlp) {
    return false;
  }
  const cuda::QuantGemvFormat f = *quant_format;
  if (cuda::quant_gemv_resolve(cuda::quant_gemv_default_kernel(T), f, T) !=
      cuda::QuantGemvKernel::kDp4a) {
    return false;
  }
  const int H = spec.hidden_size, I = spec.intermediate_size;
  const int qkv_width = spec.q_dim() + 2 * spec.kv_dim();
  for (const Layer& W : layers) {
    if (W.qkv_q.get() == nullptr || W.o_q.get() == nullptr || W.up_q.get() == nullptr ||
        W.down_q.get() == nullptr || W.attn_norm_bias.get() != nullptr ||
        W.mlp_norm_bias.get() != nullptr || W.o_bias.get() != nullptr ||
        W.up_bias.get() != nullptr || W.down_bias.get() != nullptr) {
      return false;
    }
    // The consumers' views, as quant_gemv_supported and the gated product take them.
    if (!cuda::quant_gemv_supported(h.get(), T, {W.qkv_q.get(), f, qkv_width, H}) ||
        !cuda::quant_gemv_gated_supported(h.get(), T, {W.up_q.get(), f, 2 * I, H})) {
      return false;
    }
  }
  return norm_squares.get() != nullptr;
}

cuda::QuantNormArgs CudaModel::State::norm_in_args() const {
  cuda::QuantNormArgs a;
  a.in_squares = norm_squares.as<float>();
  a.count = cuda::quant_norm_squares(spec.hidden_size);
  a.n = spec.hidden_size;
  a.eps = static_cast<float>(spec.norm_epsilon);
  return a;
}

cuda::QuantNormArgs CudaModel::State::norm_out_args(const DeviceBuffer& weight) {
  cuda::QuantNormArgs a;
  a.residual = x.as<float>();
  a.weight = weight.as<float>();
  a.scaled = h.get();
  a.out_squares = norm_squares.as<float>();
  return a;
}

}  // namespace weft::model
