#pragma once
// Quantizing a model's weight matrices (docs/quantization.md): on the fly as a model loads
// (`--quantize`), and tensor by tensor for `weft quantize`. The matrices quantized are those
// the forward pass multiplies by (attention q/k/v/o, the MLP, an untied lm head); the token
// embedding, norms and biases keep their dtype.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/quant/format.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/model_spec.hpp"
#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft::model {

// The names of the matrices Model::create binds as products for `spec`, layer by layer (the
// layers of `layers` only: a pipeline stage's), then the lm head when it is not tied to the
// embedding (every stage binds it).
std::vector<std::string> quantizable_matrix_names(const ModelSpec& spec, LayerRange layers = {});

// A [rows, cols] f32/f16/bf16 tensor quantized row by row into a heap-owned U8 tensor of
// [rows, row_bytes(type, cols)]. Errors name the tensor: not a float matrix, a weight that
// is not finite or beyond fp16's range.
Result<TensorView> quantize_matrix(const std::string& name, const TensorView& tensor,
                                   quant::QuantType type, cpu::ThreadPool* pool);

// A lookup that serves quantized copies of the spec's matrices from `base` (all made now; of
// `layers` only, plus the lm head, for a model created with that layer range) and every other
// tensor as `base` has it; its `quantized` is `type`. `progress` (may be empty) is called
// after each matrix with the source bytes done and in all.
Result<WeightLookup> quantize_weights(const WeightLookup& base, const ModelSpec& spec,
                                      quant::QuantType type, cpu::ThreadPool* pool,
                                      const std::function<void(std::size_t, std::size_t)>& progress,
                                      LayerRange layers = {});

}  // namespace weft::model
