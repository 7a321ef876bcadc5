#include "runtime/model/quantize_weights.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>

#include "kernels/cpu/quant/codec.hpp"
#include "kernels/cpu/vector_math.hpp"

namespace weft::model {

std::vector<std::string> quantizable_matrix_names(const ModelSpec& spec, LayerRange layers) {
  const auto& n = spec.tensors;
  std::vector<std::string> names;
  const int first = layers.count < 0 ? 0 : std::max(0, layers.begin);
  const int end =
      layers.count < 0 ? spec.num_layers : std::min(spec.num_layers, first + layers.count);
  for (int i = first; i < end; ++i) {
    auto add = [&](const std::string& pattern) { names.push_back(layer_tensor_name(pattern, i)); };
    if (spec.qkv_layout == QkvLayout::kSeparate) {
      add(n.q);
      add(n.k);
      add(n.v);
    } else {
      add(n.qkv);
    }
    add(n.o);
    if (spec.gated_mlp && !n.gate_up.empty()) {
      add(n.gate_up);
    } else {
      if (spec.gated_mlp) add(n.gate);
      add(n.up);
    }
    add(n.down);
  }
  if (!spec.tied_embeddings) names.push_back(n.lm_head);
  return names;
}

Result<TensorView> quantize_matrix(const std::string& name, const TensorView& tensor,
                                   quant::QuantType type, cpu::ThreadPool* pool) {
  const bool is_float =
      tensor.dtype == DType::kF32 || tensor.dtype == DType::kF16 || tensor.dtype == DType::kBF16;
  if (!is_float || tensor.shape.size() != 2) {
    return Error(ErrorCode::kInvalidArgument,
                 "tensor \"" + name + "\" (" + std::string(dtype_name(tensor.dtype)) + " " +
                     shape_string(tensor.shape) +
                     ") cannot be quantized: expected a 2-D F32, F16 or BF16 matrix");
  }
  const auto rows = static_cast<std::size_t>(tensor.shape[0]);
  const auto cols = static_cast<std::size_t>(tensor.shape[1]);
  const std::size_t stride = quant::row_bytes(type, cols);
  auto storage = std::make_shared<std::vector<std::byte>>(rows * stride);
  const std::size_t in_stride = cols * dtype_size(tensor.dtype);
  std::atomic<std::size_t> bad_row{rows};
  auto run = [&](std::size_t begin, std::size_t end) {
    std::vector<float> row(cols);
    for (std::size_t r = begin; r < end; ++r) {
      cpu::to_f32(tensor.dtype, tensor.data + r * in_stride, row.data(), cols,
                  cpu::KernelPath::kAuto);
      for (const float v : row) {
        if (!std::isfinite(v) || std::fabs(v) >= 65504.0f) {
          std::size_t expected = rows;
          bad_row.compare_exchange_strong(expected, r);
          break;
        }
      }
      quant::quantize_row(type, row.data(), cols, storage->data() + r * stride);
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(rows, run, 16);
  } else {
    run(0, rows);
  }
  if (bad_row.load() != rows) {
    return Error(ErrorCode::kInvalidArgument,
                 "tensor \"" + name + "\" row " + std::to_string(bad_row.load()) +
                     " has a weight that is not finite or beyond fp16's range (65504); block "
                     "quantization stores scale and min in fp16");
  }
  TensorView out;
  out.dtype = DType::kU8;
  out.shape = {static_cast<std::int64_t>(rows), static_cast<std::int64_t>(stride)};
  out.data = storage->data();
  out.owner = storage;
  return out;
}

Result<WeightLookup> quantize_weights(const WeightLookup& base, const ModelSpec& spec,
                                      quant::QuantType type, cpu::ThreadPool* pool,
                                      const std::function<void(std::size_t, std::size_t)>& progress,
                                      LayerRange layers) {
  if (base.quantized != quant::QuantType::kNone) {
    return Error(ErrorCode::kInvalidArgument,
                 base.where + " is already quantized (" +
                     std::string(quant::quant_info(base.quantized).name) +
                     "); quantization applies to F32, F16 and BF16 checkpoints");
  }
  std::vector<std::pair<std::string, const TensorView*>> sources;
  std::size_t total = 0;
  for (const auto& name : quantizable_matrix_names(spec, layers)) {
    // An absent matrix is left for Model::create to report with its block and shape.
    if (const TensorView* t = base.find(name)) {
      sources.emplace_back(name, t);
      total += t->nbytes();
    }
  }
  auto made = std::make_shared<std::map<std::string, TensorView>>();
  std::size_t done = 0;
  for (const auto& [name, t] : sources) {
    auto q = quantize_matrix(name, *t, type, pool);
    if (!q) return Error(q.error().code(), base.origin(name) + ": " + q.error().what());
    made->emplace(name, std::move(q.value()));
    done += t->nbytes();
    if (progress) progress(done, total);
  }
  WeightLookup out = base;
  out.quantized = type;
  out.find = [made, find = base.find](const std::string& name) -> const TensorView* {
    if (auto it = made->find(name); it != made->end()) return &it->second;
    return find(name);
  };
  return out;
}

}  // namespace weft::model
