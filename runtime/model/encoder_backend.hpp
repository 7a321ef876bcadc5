#pragma once
// Where an encoder-only model's forward pass runs: the CPU (EncoderModel::encode on a thread
// pool) or a GPU (runtime/model/cuda/cuda_encoder.hpp). The embedding actor owns one and
// calls it from its device thread only.

#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/thread_pool.hpp"
#include "runtime/model/encoder_model.hpp"
#include "weft/error.hpp"

namespace weft::model {

class EncoderBackend {
 public:
  virtual ~EncoderBackend() = default;
  // Fills `hidden` with the batch's last hidden states, [tokens, hidden_size] fp32, as
  // EncoderModel::encode; invalid batches are refused with its errors.
  virtual Result<void> encode(const EncodeBatch& batch, std::vector<float>& hidden) = 0;
  // "cpu", "cuda:0 (bf16)": for logs.
  virtual std::string describe() const = 0;
};

// The model's own CPU forward pass. `model` must outlive the backend.
class CpuEncoderBackend final : public EncoderBackend {
 public:
  CpuEncoderBackend(const EncoderModel& model, unsigned threads) : model_(model), pool_(threads) {}
  Result<void> encode(const EncodeBatch& batch, std::vector<float>& hidden) override {
    return model_.encode(batch, hidden, pool_);
  }
  std::string describe() const override {
    return "cpu (" + std::to_string(pool_.size()) + " threads)";
  }

 private:
  const EncoderModel& model_;
  cpu::ThreadPool pool_;
};

}  // namespace weft::model
