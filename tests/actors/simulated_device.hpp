#pragma once
// A forward backend that stands in for a GPU (EngineConfig::make_backend): it samples "on the
// device" like CudaModel (launch() returns at once, sample() waits for the step), its forward
// pass only takes time (a sleep of `forward` per step, no CPU), and its tokens come from a
// hash of each row's context instead of a model. The step loop's host work then shows as
// exactly what it costs a GPU: time between one step's sampled tokens and the next launch.
//
// Each row's draw is a pure function of (seed, position, last token): close to a uniform draw
// among the tokens its bitmask allows (see pick), so a constrained row always draws an allowed
// token; a row without a mask draws any token.
// Logprobs are 0. Used by bench/constrained_step_bench.cpp and the constraint engine tests.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "runtime/model/forward_backend.hpp"
#include "runtime/model/model.hpp"

namespace weft::test_support {

// What the host made the simulated GPU wait for, per launched step: `late`, how long after
// the forward pass would have ended the step was sampled (its masks, the sampler's plan), and
// `gap`, the time from the step's sampled tokens to the next launch (accepting the tokens,
// detokenizing, planning). A real GPU idles for both. Filled on the executor's thread; read
// after the engine has stopped.
struct SimulatedDeviceStats {
  std::vector<double> late_us;   // per sampled step
  std::vector<double> gap_us;    // per launch after the first
  std::vector<int> masked_rows;  // per sampled step: rows with a bitmask
};

class SimulatedDevice final : public model::ForwardBackend {
 public:
  SimulatedDevice(const model::Model& model, int num_pages, std::chrono::microseconds forward,
                  std::uint64_t seed = 1, std::shared_ptr<SimulatedDeviceStats> stats = nullptr)
      : spec_(model.spec()),
        num_pages_(num_pages),
        forward_(forward),
        seed_(seed),
        stats_(std::move(stats)) {}

  const model::ModelSpec& spec() const noexcept override { return spec_; }
  int num_pages() const noexcept override { return num_pages_; }
  bool samples_on_device() const noexcept override { return true; }

  // Speculative verification and prompt scoring read logits on the host: the same draws as
  // one-hot rows (0 for the drawn token, -30 elsewhere).
  Result<void> forward(const model::StepBatch& batch, std::vector<float>& logits) override {
    std::this_thread::sleep_for(forward_);
    const auto V = static_cast<std::size_t>(spec_.vocab_size);
    std::vector<std::uint64_t> keys = row_keys(batch);
    logits.assign(keys.size() * V, -30.0f);
    for (std::size_t r = 0; r < keys.size(); ++r)
      logits[r * V + keys[r] % V] = 0.0f;
    return {};
  }

  Result<void> launch(const model::StepBatch& batch) override {
    launched_ = std::chrono::steady_clock::now();
    if (stats_ && sampled_ != std::chrono::steady_clock::time_point{}) {
      stats_->gap_us.push_back(us(launched_ - sampled_));
    }
    keys_ = row_keys(batch);
    return {};
  }

  Result<void> sample(const model::DeviceSamplingInput& in,
                      model::DeviceSamplingOutput& out) override {
    const int V = spec_.vocab_size;
    const std::size_t words = (static_cast<std::size_t>(V) + 31) / 32;
    const auto called = std::chrono::steady_clock::now();
    out.results.assign(in.rows.size(), {});
    out.candidates.clear();
    out.top.assign(in.rows.size() * sampling::kDeviceTopEntries, {});
    out.host_rows.assign(in.rows.size(), {});
    for (std::size_t k = 0; k < in.rows.size(); ++k) {
      const sampling::DeviceSampleRow& r = in.rows[k];
      if (r.row < 0 || static_cast<std::size_t>(r.row) >= keys_.size()) {
        return Error(ErrorCode::kInternal,
                     "simulated device: row " + std::to_string(r.row) + " was not launched");
      }
      if (r.mask_word_offset >= 0 &&
          static_cast<std::size_t>(r.mask_word_offset) + words > in.masks.size()) {
        return Error(ErrorCode::kInternal, "simulated device: a bitmask past the masks");
      }
      const std::uint32_t* mask =
          r.mask_word_offset >= 0 ? in.masks.data() + r.mask_word_offset : nullptr;
      sampling::DeviceSampleResult& res = out.results[k];
      res.raw_max = 0.0f;
      res.raw_sum = 1.0;
      res.token = pick(keys_[static_cast<std::size_t>(r.row)], mask);
      if (res.token < 0) res.status = sampling::DeviceSampleStatus::kNoneAllowed;
    }
    std::this_thread::sleep_until(launched_ + forward_);
    if (stats_) {
      stats_->late_us.push_back(std::max(0.0, us(called - (launched_ + forward_))));
      int masked = 0;
      for (const auto& r : in.rows)
        masked += r.mask_word_offset >= 0;
      stats_->masked_rows.push_back(masked);
    }
    sampled_ = std::chrono::steady_clock::now();
    return {};
  }

 private:
  static double us(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double, std::micro>(d).count();
  }
  static std::uint64_t mix(std::uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
  }
  std::vector<std::uint64_t> row_keys(const model::StepBatch& batch) const {
    std::vector<std::uint64_t> keys;
    for (const auto& s : batch.sequences) {
      const int rows = s.all_logits ? s.token_count : (s.token_count > 0);
      for (int j = 0; j < rows; ++j) {
        const int at = s.all_logits ? s.token_begin + j : s.token_begin + s.token_count - 1;
        const auto token = static_cast<std::uint64_t>(batch.tokens[static_cast<std::size_t>(at)]);
        const auto position =
            static_cast<std::uint64_t>(batch.positions[static_cast<std::size_t>(at)]);
        keys.push_back(mix(seed_ ^ mix(token * 0x9e3779b97f4a7c15ull + position)));
      }
    }
    return keys;
  }
  // Close to a uniform draw among the allowed tokens (as the argmax of a random model's logits
  // is): the first of 64 tokens drawn from the key that the mask allows, else the first
  // allowed token at or after key % V, wrapping; -1 when none is.
  std::int32_t pick(std::uint64_t key, const std::uint32_t* mask) const {
    const auto V = static_cast<std::uint32_t>(spec_.vocab_size);
    const auto start = static_cast<std::uint32_t>(key % V);
    if (mask == nullptr) return static_cast<std::int32_t>(start);
    for (std::uint64_t j = 1; j <= 64; ++j) {
      const auto t = static_cast<std::uint32_t>(mix(key + j) % V);
      if ((mask[t / 32] >> (t % 32)) & 1u) return static_cast<std::int32_t>(t);
    }
    for (std::uint32_t n = 0; n < V;) {
      const std::uint32_t t = (start + n) % V;
      const std::uint32_t word = mask[t / 32] >> (t % 32);
      if (word != 0) {
        const auto skip = static_cast<std::uint32_t>(__builtin_ctz(word));
        if (n + skip < V) return static_cast<std::int32_t>((t + skip) % V);
        return -1;
      }
      n += 32 - t % 32;  // to the next word
    }
    return -1;
  }

  const model::ModelSpec& spec_;
  int num_pages_;
  std::chrono::microseconds forward_;
  std::uint64_t seed_;
  std::shared_ptr<SimulatedDeviceStats> stats_;
  std::chrono::steady_clock::time_point launched_{}, sampled_{};
  std::vector<std::uint64_t> keys_;
};

}  // namespace weft::test_support
