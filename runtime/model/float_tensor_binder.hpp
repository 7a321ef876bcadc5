// FloatTensorBinder: finds a spec's 16/32-bit float tensors in a checkpoint, checks their dtype
// and shape with errors naming the tensor, its block and the file, and keeps what the bound
// views need alive. Shared by the encoder-only and encoder-decoder models' CPU weights.

#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/vector_math.hpp"
#include "runtime/model/model.hpp"

namespace weft::model {

class FloatTensorBinder {
 public:
  // `prefix` is put before every name (the checkpoint's, e.g. "bert.").
  FloatTensorBinder(const ModelSpec& spec, const WeightLookup& weights,
                    std::vector<std::shared_ptr<const void>>& owners, std::string prefix = {})
      : spec_(spec), weights_(weights), owners_(owners), prefix_(std::move(prefix)) {}

  Result<TensorView> tensor(const std::string& pattern, const std::vector<std::int64_t>& shape,
                            const std::string& block) {
    const std::string name = prefix_ + pattern;
    const TensorView* t = weights_.find(name);
    if (t == nullptr) {
      return Error(ErrorCode::kNotFound, weights_.where + ": tensor \"" + name + "\" (" + block +
                                             ") required by the " + spec_.architecture +
                                             " spec is absent from the checkpoint");
    }
    if (t->dtype != DType::kF32 && t->dtype != DType::kF16 && t->dtype != DType::kBF16) {
      return Error(ErrorCode::kInvalidArgument,
                   weights_.origin(name) + ": tensor \"" + name + "\" has dtype " +
                       std::string(dtype_name(t->dtype)) + ", expected F32, F16 or BF16");
    }
    if (t->shape != shape) {
      return Error(ErrorCode::kInvalidArgument,
                   weights_.origin(name) + ": tensor \"" + name + "\" has shape " +
                       shape_string(t->shape) + ", but the " + spec_.architecture +
                       " spec with this config.json expects " + shape_string(shape));
    }
    TensorView view = *t;
    if (reinterpret_cast<std::uintptr_t>(view.data) % dtype_size(view.dtype) != 0) {
      // Kernels read through typed pointers: copy a misaligned tensor once.
      auto copy = std::make_shared<std::vector<std::uint64_t>>((view.nbytes() + 7) / 8);
      std::memcpy(copy->data(), view.data, view.nbytes());
      view.data = reinterpret_cast<const std::byte*>(copy->data());
      view.owner = copy;
    }
    owners_.push_back(view.owner);
    return view;
  }

  Result<cpu::WeightMatrix> matrix(const std::string& pattern, std::int64_t rows, std::int64_t cols,
                                   const std::string& block) {
    auto t = tensor(pattern, {rows, cols}, block);
    if (!t) return t.error();
    return cpu::WeightMatrix{t->dtype, t->data, static_cast<std::size_t>(rows),
                             static_cast<std::size_t>(cols)};
  }

  // A vector or a [rows, cols] table, converted to fp32.
  Result<std::vector<float>> vector(const std::string& pattern, std::int64_t n,
                                    const std::string& block) {
    return floats(pattern, {n}, block);
  }
  Result<std::vector<float>> table(const std::string& pattern, std::int64_t rows, std::int64_t cols,
                                   const std::string& block) {
    return floats(pattern, {rows, cols}, block);
  }

  bool has(const std::string& pattern) const { return weights_.find(prefix_ + pattern) != nullptr; }

 private:
  Result<std::vector<float>> floats(const std::string& pattern,
                                    const std::vector<std::int64_t>& shape,
                                    const std::string& block) {
    auto t = tensor(pattern, shape, block);
    if (!t) return t.error();
    std::vector<float> out(static_cast<std::size_t>(t->numel()));
    cpu::to_f32(t->dtype, t->data, out.data(), out.size(), cpu::KernelPath::kScalar);
    return out;
  }

  const ModelSpec& spec_;
  const WeightLookup& weights_;
  std::vector<std::shared_ptr<const void>>& owners_;
  std::string prefix_;
};

}  // namespace weft::model
