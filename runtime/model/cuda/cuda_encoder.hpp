#pragma once
// An encoder-only model (BERT, RoBERTa, XLM-R) on one GPU: the weights of a (CPU-bound,
// already checked) EncoderModel uploaded in bf16 or fp16, and the forward pass of
// EncoderModel::encode over a batch of whole sequences packed end to end: embeddings (word +
// learned position + token type) and their LayerNorm, then per layer a fused qkv product,
// attention in both directions within each sequence (kernels/cuda/encoder.hpp), the output
// product, add + LayerNorm, the MLP, add + LayerNorm. The residual stream stays fp32; products
// take 16-bit inputs with fp32 sums (cuBLAS). The last hidden states come back to the host
// as fp32, where the embedding queue pools them as it does the CPU's.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/precision.hpp"
#include "runtime/model/encoder_backend.hpp"
#include "runtime/model/encoder_model.hpp"
#include "weft/error.hpp"

namespace weft::model {

struct CudaEncoderOptions {
  int device = 0;
  cuda::Precision precision = cuda::Precision::kBF16;
  // Step buffers are sized for this many tokens at creation; a larger batch grows them.
  int max_tokens_per_step = 512;
};

class CudaEncoder final : public EncoderBackend {
 public:
  // Uploads the model's weights. Errors: no such device, out of device memory, head_dim above
  // 256. `model` must outlive the encoder (its checks run before every batch).
  static Result<std::unique_ptr<CudaEncoder>> create(const EncoderModel& model,
                                                     const CudaEncoderOptions& options);
  ~CudaEncoder() override;
  CudaEncoder(const CudaEncoder&) = delete;
  CudaEncoder& operator=(const CudaEncoder&) = delete;

  // As EncoderModel::encode: the same checks and errors; a CUDA failure is kInternal.
  Result<void> encode(const EncodeBatch& batch, std::vector<float>& hidden) override;
  std::string describe() const override;

  // Device bytes the weights take.
  std::size_t weight_bytes() const noexcept;

  struct State;

 private:
  explicit CudaEncoder(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace weft::model
