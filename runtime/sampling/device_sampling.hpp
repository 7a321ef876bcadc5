#pragma once
// What a device sampler exchanges with SequenceSampler: the per-row description of one draw
// (built on the host from the sequence's parameters, history and random number) and the
// per-row result the device returns. Plain structs of fixed layout, shared by host code and
// kernels/cuda/sampling.cu.
//
// The device does the work that touches every token of the row — bitmask, raw maximum and
// normaliser (for logprobs), logit bias and penalties, greedy argmax, the weights
// exp((x - max) / T) and their sum, the inverse CDF when nothing truncates, top-k's
// threshold, and the candidates above top-p/min-p's floor — exactly as
// SequenceSampler::choose orders it. What depends on a few candidates (top-p, min-p over
// them, the draw) is finished on the host by the same code the CPU path runs, so both paths
// give the same distribution; only rounding differs (summation order, the device's expf against
// the host's).

#include <cstdint>

namespace weft::sampling {

enum class DeviceSampleMode : std::int32_t {
  kGreedy = 0,  // argmax after bias and penalties, lowest id on ties
  kFull = 1,    // draw from every token by inverse CDF in id order, on the device
  kTopK = 2,    // candidates: the tokens >= the k-th largest logit
  kFloor = 3,   // candidates: the tokens whose weight is >= the top-p/min-p floor
  // kTopK and kFloor: when the candidates are more than kDeviceCandidatesPerRow, top-p,
  // min-p and the draw run on the device (same distribution, another draw order), unless
  // typical-p is on (the host then samples the raw row).
};

struct DeviceSampleRow {
  std::int32_t row = 0;  // row of the step's logits
  DeviceSampleMode mode = DeviceSampleMode::kGreedy;
  std::int32_t mask_word_offset = -1;  // first word of the allowed-token bitmask; -1: none
  std::int32_t edit_begin = 0;         // this row's DeviceSampleEdits
  std::int32_t edit_count = 0;
  std::int32_t top_k = 0;     // kTopK
  std::int32_t logprobs = 0;  // top raw logprobs wanted, [0, 20]
  float temperature = 1.0f;   // > 0 unless kGreedy
  float top_p = 1.0f;         // kFloor: the floor's inputs
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // kTypicalP when typical-p is on, kHostFinish when tail-free sampling or mirostat is: the
  // host must finish the draw (from the candidates, or from the raw row when they are too
  // many); the device never draws such a row itself.
  std::int32_t flags = 0;
  double u = 0.0;  // the uniform draw in [0, 1) (every mode but kGreedy)
};

inline constexpr std::int32_t kTypicalP = 1;
inline constexpr std::int32_t kHostFinish = 2;

// One token the bias or a penalty changes; at most one edit per id and row.
struct DeviceSampleEdit {
  std::int32_t id = 0;
  float bias = 0.0f;        // added first (logit_bias)
  std::int32_t repeat = 0;  // in prompt or output: repetition_penalty applies
  std::int32_t count = 0;   // times in the output: presence/frequency penalties apply
};

enum class DeviceSampleStatus : std::int32_t {
  kOk = 0,
  kNoneAllowed = 1,  // the bitmask allows no token
  kHostRow = 2,      // the host must sample this row from the raw row (an error to report,
                     // or more candidates than the result holds)
};

struct DeviceCandidate {
  std::int32_t id = 0;
  float weight = 0.0f;  // exp((x - max) / T) after bias and penalties
  float raw = 0.0f;     // the raw (masked) logit, for the chosen token's logprob
};

struct DeviceSampleResult {
  DeviceSampleStatus status = DeviceSampleStatus::kOk;
  std::int32_t token = -1;      // kGreedy, kFull
  std::int32_t candidates = 0;  // kTopK, kFloor: how many DeviceCandidates, from `offset`
  std::int32_t offset = 0;      // where this row's candidates start in the step's output
  std::int32_t top = 0;         // raw entries >= the logprobs-th largest (<= the top capacity)
  double total = 0.0;           // sum of the weights over the top-k set or the whole row
  double raw_sum = 0.0;         // sum exp(raw - raw_max) over the raw (masked) row
  float raw_max = 0.0f;         // of the raw (masked) row
  float chosen_raw = 0.0f;      // raw logit of `token`
  std::int32_t pad = 0;
};

// Capacities of the result buffers, per row: a row with more candidates than
// kDeviceCandidatesPerRow has top-p/min-p finished on the device (kFloor) or is sampled by the
// host from its raw row; kDeviceTopEntries for the top logprobs.
inline constexpr int kDeviceCandidatesPerRow = 256;
inline constexpr int kDeviceTopEntries = 64;

}  // namespace weft::sampling
