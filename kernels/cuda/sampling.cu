#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/sampling.hpp"

namespace weft::cuda {
namespace {

using sampling::DeviceCandidate;
using sampling::DeviceSampleMode;
using sampling::DeviceSampleResult;
using sampling::DeviceSampleRow;
using sampling::DeviceSampleStatus;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kCap = sampling::kDeviceCandidatesPerRow;
// Weights (at most 1) in fixed point for top-p's mass histogram: integer sums do not depend
// on the order the atomics land in, so a row's result does not either.
constexpr double kMassScale = 1099511627776.0;  // 2^40

// Order-preserving map of a float onto an unsigned key (larger float, larger key).
__device__ __forceinline__ unsigned to_key(float v) {
  const unsigned u = __float_as_uint(v);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float from_key(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
__device__ __forceinline__ bool is_finite(float v) {
  return isfinite(v);
}

struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

struct MaxIndex {
  float value;
  int index;
};
struct MaxIndexOp {
  __device__ MaxIndex operator()(const MaxIndex& a, const MaxIndex& b) const {
    if (a.value > b.value) return a;
    if (b.value > a.value) return b;
    return a.index <= b.index ? a : b;
  }
};

struct Shared {
  union {
    cub::BlockReduce<float, kThreads>::TempStorage reduce_float;
    cub::BlockReduce<double, kThreads>::TempStorage reduce_double;
    cub::BlockReduce<int, kThreads>::TempStorage reduce_int;
    cub::BlockReduce<MaxIndex, kThreads>::TempStorage reduce_max_index;
    cub::BlockScan<double, kThreads>::TempStorage scan_double;
    cub::BlockScan<int, kThreads>::TempStorage scan_int;
    struct {
      unsigned histogram[kWarps][256];
      unsigned long long mass[256];  // fixed point, kMassScale units: atomics in any order agree
    };
  };
  alignas(16) unsigned char slot[16];  // from_thread0's broadcast
  unsigned long long mass_above;
  int i;
  int j;
};

// Thread 0's value, for every thread of the block (the reductions leave it there only).
template <class T>
__device__ T from_thread0(const T& v, Shared& s) {
  static_assert(sizeof(T) <= sizeof(s.slot));
  if (threadIdx.x == 0) memcpy(s.slot, &v, sizeof(T));
  __syncthreads();
  T out;
  memcpy(&out, s.slot, sizeof(T));
  __syncthreads();
  return out;
}
__device__ float block_max(float v, Shared& s) {
  return from_thread0(cub::BlockReduce<float, kThreads>(s.reduce_float).Reduce(v, MaxOp()), s);
}
__device__ double block_sum(double v, Shared& s) {
  return from_thread0(cub::BlockReduce<double, kThreads>(s.reduce_double).Sum(v), s);
}
__device__ int block_sum(int v, Shared& s) {
  return from_thread0(cub::BlockReduce<int, kThreads>(s.reduce_int).Sum(v), s);
}
__device__ MaxIndex block_argmax(MaxIndex v, Shared& s) {
  return from_thread0(
      cub::BlockReduce<MaxIndex, kThreads>(s.reduce_max_index).Reduce(v, MaxIndexOp()), s);
}
// Exclusive prefix over threads; `total` receives the sum of all.
__device__ int block_exclusive(int v, int& total, Shared& s) {
  int out = 0;
  cub::BlockScan<int, kThreads>(s.scan_int).ExclusiveSum(v, out, total);
  __syncthreads();
  return out;
}
__device__ double block_exclusive(double v, double& total, Shared& s) {
  double out = 0;
  cub::BlockScan<double, kThreads>(s.scan_double).ExclusiveSum(v, out, total);
  __syncthreads();
  return out;
}

// The k-th largest finite value of x[0, n) counting repeats (a radix select over the keys,
// one byte per pass), or -inf when fewer than k values are finite.
__device__ float kth_largest(const float* x, int n, int k, Shared& s) {
  unsigned prefix = 0, prefix_mask = 0;
  int remaining = k;
  const int warp = threadIdx.x / 32;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kWarps * 256; b += kThreads)
      (&s.histogram[0][0])[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const float v = x[i];
      if (!is_finite(v)) continue;
      const unsigned key = to_key(v);
      if ((key & prefix_mask) == prefix) atomicAdd(&s.histogram[warp][(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    // Sum the warps' histograms into the first one.
    for (int b = threadIdx.x; b < 256; b += kThreads) {
      unsigned total = 0;
      for (int w = 0; w < kWarps; ++w)
        total += s.histogram[w][b];
      s.histogram[0][b] = total;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int cumulative = 0;
      int chosen = -1;
      for (int b = 255; b >= 0; --b) {
        const int c = static_cast<int>(s.histogram[0][b]);
        if (cumulative + c >= remaining) {
          chosen = b;
          remaining -= cumulative;
          break;
        }
        cumulative += c;
      }
      s.j = chosen;
      s.i = remaining;
    }
    __syncthreads();
    const int chosen = s.j;
    remaining = s.i;
    __syncthreads();
    if (chosen < 0) return -INFINITY;
    prefix |= static_cast<unsigned>(chosen) << shift;
    prefix_mask |= 255u << shift;
  }
  return from_key(prefix);
}

// The thread's contiguous slice of [0, n): ordered passes (inverse CDF, collecting
// candidates in id order) give each thread one slice and scan over threads.
__device__ __forceinline__ void my_slice(int n, int& begin, int& end) {
  const int per = (n + kThreads - 1) / kThreads;
  begin = min(n, static_cast<int>(threadIdx.x) * per);
  end = min(n, begin + per);
}

// Counts every i with w(i) >= threshold and, when there are at most `cap`, writes them in id
// order to `out`. Returns how many there are, sets `mass` to their weights' sum, and ends
// with a barrier so every thread may read what the others wrote.
template <class Weight>
__device__ int collect(const float* raw, int n, float threshold, Weight weight,
                       DeviceCandidate* out, int cap, double& mass, Shared& s) {
  int begin = 0, end = 0;
  my_slice(n, begin, end);
  int count = 0;
  double sum = 0.0;
  for (int i = begin; i < end; ++i) {
    const float w = weight(i);
    if (w >= threshold) {
      ++count;
      sum += w;
    }
  }
  int total = 0;
  int at = block_exclusive(count, total, s);
  mass = block_sum(sum, s);
  if (total <= cap) {
    for (int i = begin; i < end; ++i) {
      const float w = weight(i);
      if (w >= threshold) {
        out[at] = DeviceCandidate{i, w, raw[i]};
        ++at;
      }
    }
  }
  __syncthreads();
  return total;
}

// Inverse CDF in id order: the first token whose cumulative weight exceeds u * total, where
// weight(i) >= 0 (0 for a token that cannot be drawn); `total` receives the sum. Each thread
// sums one slice, a scan over threads places the target, and that slice is walked.
template <class Weight>
__device__ int draw_in_id_order(int n, Weight weight, double u, double& total, Shared& s) {
  int begin = 0, end = 0;
  my_slice(n, begin, end);
  double mine = 0.0;
  for (int i = begin; i < end; ++i)
    mine += weight(i);
  const double before = block_exclusive(mine, total, s);
  const double target = u * total;
  if (threadIdx.x == 0) s.i = INT_MAX;
  __syncthreads();
  if (mine > 0.0 && before <= target && target < before + mine) {
    // With rounding two neighbouring slices may both claim the target: the lower id wins.
    double cumulative = before;
    int last = -1;
    for (int i = begin; i < end; ++i) {
      const float w = weight(i);
      if (w <= 0.0f) continue;
      cumulative += w;
      last = i;
      if (cumulative > target) break;
    }
    atomicMin(&s.i, last);
  }
  __syncthreads();
  int token = s.i == INT_MAX ? -1 : s.i;
  __syncthreads();
  if (token < 0) {
    // Rounding left the target at the very end: the last token with weight.
    MaxIndex last{-1.0f, -1};
    for (int i = threadIdx.x; i < n; i += kThreads) {
      if (weight(i) > 0.0f && i > last.index) last = MaxIndex{0.0f, i};
    }
    last.value = static_cast<float>(last.index);  // the largest index wins the reduction
    last = block_argmax(last, s);
    token = last.index;
  }
  return token;
}

// Top-p and min-p over a whole row, for rows whose survivors are too many to hand to the
// host: top-p's threshold by a radix select on the weights' bits that carries each bin's
// mass (the shortest most-likely-first prefix with mass >= top_p * total; among tokens tied
// at the threshold the lowest ids), then min-p (weight >= min_p, the largest weight being 1),
// then the draw in id order. `out` (the row's work buffer, which `weight` reads) receives the
// survivors' weights, each thread writing the slice it reads. The distribution is the host's; for a
// given uniform the token may differ, since the host draws in another order.
template <class Weight>
__device__ int top_p_draw(int n, Weight weight, float* out, const DeviceSampleRow& r, double total,
                          double& survivors, Shared& s) {
  float threshold = 0.0f;  // weights above it survive top-p
  int ties_kept = 0;       // and this many of the lowest ids with weight == threshold
  bool cut = r.top_p < 1.0f;
  if (cut) {
    const auto target =
        static_cast<unsigned long long>(static_cast<double>(r.top_p) * total * kMassScale);
    unsigned prefix = 0, prefix_mask = 0;
    unsigned long long above = 0;  // mass of the tokens whose key is above the prefix's range
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < 256; b += kThreads)
        s.mass[b] = 0;
      __syncthreads();
      for (int i = threadIdx.x; i < n; i += kThreads) {
        const float w = weight(i);
        if (w <= 0.0f) continue;
        const unsigned key = __float_as_uint(w);
        if ((key & prefix_mask) == prefix) {
          atomicAdd(&s.mass[(key >> shift) & 255u],
                    static_cast<unsigned long long>(static_cast<double>(w) * kMassScale));
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        unsigned long long cumulative = above;
        int chosen = 0;
        for (int b = 255; b >= 0; --b) {
          if (cumulative + s.mass[b] >= target || b == 0) {
            chosen = b;
            break;
          }
          cumulative += s.mass[b];
        }
        s.j = chosen;
        s.mass_above = cumulative;
      }
      __syncthreads();
      prefix |= static_cast<unsigned>(s.j) << shift;
      prefix_mask |= 255u << shift;
      above = s.mass_above;
      __syncthreads();
    }
    threshold = __uint_as_float(prefix);
    // `above` is now the mass strictly above the threshold: take enough tied tokens.
    const double need = static_cast<double>(target) - static_cast<double>(above);
    // At least one; at most n (a zero or subnormal threshold would make the quotient
    // overflow an int).
    const double quotient = ceil(need / (static_cast<double>(threshold) * kMassScale));
    ties_kept = need <= 0.0 || !(quotient >= 1.0)
                    ? 1
                    : static_cast<int>(fmin(quotient, static_cast<double>(n)));
  }
  // The ties' ranks in id order: each slice counts its own, a scan places them.
  int begin = 0, end = 0;
  my_slice(n, begin, end);
  int mine = 0;
  if (cut) {
    for (int i = begin; i < end; ++i)
      mine += weight(i) == threshold ? 1 : 0;
  }
  int all_ties = 0;
  const int rank_base = block_exclusive(mine, all_ties, s);
  (void)all_ties;
  // Each thread turns its own slice's weights into survivor weights (0: removed), in place.
  const float min_p = r.min_p;
  int rank = rank_base;
  for (int i = begin; i < end; ++i) {
    const float w = weight(i);
    float kept = w;
    if (w < min_p || w <= 0.0f) {
      kept = 0.0f;
    } else if (cut && w < threshold) {
      kept = 0.0f;
    } else if (cut && w == threshold) {
      kept = rank < ties_kept ? w : 0.0f;
      ++rank;
    }
    out[i] = kept;
  }
  __syncthreads();
  return draw_in_id_order(
      n, [out](int i) { return out[i]; }, r.u, survivors, s);
}

__global__ void __launch_bounds__(kThreads)
    sample_kernel(sampling::DeviceSampleRow const* rows, float* logits, float* work_base, int n,
                  const sampling::DeviceSampleEdit* edits, const std::uint32_t* masks,
                  DeviceSampleResult* results, DeviceCandidate* pool, DeviceCandidate* top_base) {
  __shared__ Shared s;
  const DeviceSampleRow r = rows[blockIdx.x];
  float* raw = logits + static_cast<std::size_t>(r.row) * n;
  float* work = work_base + static_cast<std::size_t>(blockIdx.x) * n;
  DeviceCandidate* top =
      top_base + static_cast<std::size_t>(blockIdx.x) * sampling::kDeviceTopEntries;
  DeviceSampleResult result;
  const std::uint32_t* mask = r.mask_word_offset >= 0 ? masks + r.mask_word_offset : nullptr;

  // 1. The bitmask (in place, so the raw row is the masked row), the raw maximum, and a copy
  //    to work on.
  //    Rows of a multiple of 4 (16-byte aligned, as the logits and work rows then are) go
  //    4 entries per load, several loads in flight per thread: one block per row must stream
  //    a 128K-entry row fast (a scalar loop ran ~0.1 ms per pass). Same values either way;
  //    only which thread sums which entries of raw_sum changes.
  const bool vec = n % 4 == 0 && reinterpret_cast<std::uintptr_t>(raw) % 16 == 0 &&
                   reinterpret_cast<std::uintptr_t>(work) % 16 == 0;
  float max_raw = -INFINITY;
  int allowed = 0, bad = 0;
  auto first_pass = [&](int i, float v) {
    if (mask != nullptr) {
      if ((mask[i >> 5] >> (i & 31)) & 1u) {
        ++allowed;
      } else {
        v = -INFINITY;
      }
    }
    if (isnan(v) || v == INFINITY) bad = 1;
    max_raw = fmaxf(max_raw, v);
    return v;
  };
  if (vec) {
    auto* raw4 = reinterpret_cast<float4*>(raw);
    auto* work4 = reinterpret_cast<float4*>(work);
#pragma unroll 4
    for (int j = threadIdx.x; j < n / 4; j += kThreads) {
      const float4 in = raw4[j];
      const float4 v = make_float4(first_pass(4 * j, in.x), first_pass(4 * j + 1, in.y),
                                   first_pass(4 * j + 2, in.z), first_pass(4 * j + 3, in.w));
      if (mask != nullptr) raw4[j] = v;
      work4[j] = v;
    }
  } else {
    for (int i = threadIdx.x; i < n; i += kThreads) {
      const float v = first_pass(i, raw[i]);
      if (mask != nullptr) raw[i] = v;
      work[i] = v;
    }
  }
  max_raw = block_max(max_raw, s);
  bad = block_sum(bad, s);
  if (mask != nullptr && block_sum(allowed, s) == 0) {
    if (threadIdx.x == 0) {
      result.status = DeviceSampleStatus::kNoneAllowed;
      results[blockIdx.x] = result;
    }
    return;
  }
  if (bad != 0 || max_raw == -INFINITY) {
    // The host reports the exact error from the row itself.
    if (threadIdx.x == 0) {
      result.status = DeviceSampleStatus::kHostRow;
      results[blockIdx.x] = result;
    }
    return;
  }
  double raw_sum = 0.0;
  if (vec) {
    const auto* raw4 = reinterpret_cast<const float4*>(raw);
#pragma unroll 4
    for (int j = threadIdx.x; j < n / 4; j += kThreads) {
      const float4 v = raw4[j];
      raw_sum += expf(v.x - max_raw);
      raw_sum += expf(v.y - max_raw);
      raw_sum += expf(v.z - max_raw);
      raw_sum += expf(v.w - max_raw);
    }
  } else {
    for (int i = threadIdx.x; i < n; i += kThreads)
      raw_sum += expf(raw[i] - max_raw);
  }
  result.raw_sum = block_sum(raw_sum, s);
  result.raw_max = max_raw;

  // 2. The top raw entries for logprobs: every finite entry >= the logprobs-th largest.
  if (r.logprobs > 0) {
    const float kth = kth_largest(raw, n, r.logprobs, s);
    double unused = 0.0;
    result.top = collect(
        raw, n, kth == -INFINITY ? -FLT_MAX : kth,
        [raw](int i) { return is_finite(raw[i]) ? raw[i] : -INFINITY; }, top,
        sampling::kDeviceTopEntries, unused, s);
    if (result.top > sampling::kDeviceTopEntries) {
      if (threadIdx.x == 0) {
        result.status = DeviceSampleStatus::kHostRow;
        results[blockIdx.x] = result;
      }
      return;
    }
  }

  // 3. Logit bias, then the repetition penalty, then presence and frequency (one edit per id,
  //    so the edits run in parallel). The products are rounded as the CPU rounds them.
  for (int e = threadIdx.x; e < r.edit_count; e += kThreads) {
    const sampling::DeviceSampleEdit edit = edits[r.edit_begin + e];
    float v = work[edit.id];
    v = __fadd_rn(v, edit.bias);
    if (edit.repeat) {
      v = v > 0.0f ? __fdiv_rn(v, r.repetition_penalty) : __fmul_rn(v, r.repetition_penalty);
    }
    if (edit.count > 0) {
      v = __fsub_rn(v, __fadd_rn(__fmul_rn(static_cast<float>(edit.count), r.frequency_penalty),
                                 r.presence_penalty));
    }
    work[edit.id] = v;
  }
  __syncthreads();

  if (r.mode == DeviceSampleMode::kGreedy) {
    MaxIndex best{-INFINITY, n};
    auto consider = [&](int i, float v) {
      if (v > best.value || (v == best.value && i < best.index)) best = MaxIndex{v, i};
    };
    if (vec) {
      const auto* work4 = reinterpret_cast<const float4*>(work);
#pragma unroll 4
      for (int j = threadIdx.x; j < n / 4; j += kThreads) {
        const float4 v = work4[j];
        consider(4 * j, v.x);
        consider(4 * j + 1, v.y);
        consider(4 * j + 2, v.z);
        consider(4 * j + 3, v.w);
      }
    } else {
      for (int i = threadIdx.x; i < n; i += kThreads)
        consider(i, work[i]);
    }
    best = block_argmax(best, s);
    if (threadIdx.x == 0) {
      // Every entry -inf (possible only when penalties push the last finite one there): the
      // lowest id, as the CPU's argmax.
      result.token = best.index < n ? best.index : 0;
      result.chosen_raw = raw[result.token];
      results[blockIdx.x] = result;
    }
    return;
  }

  float max_work = -INFINITY;
  int plus_inf = 0;
  for (int i = threadIdx.x; i < n; i += kThreads) {
    const float v = work[i];
    if (v == INFINITY) plus_inf = 1;
    max_work = fmaxf(max_work, v);
  }
  max_work = block_max(max_work, s);
  // +inf, or bias and penalties that left no finite logit: the host reports which.
  if (block_sum(plus_inf, s) != 0 || max_work == -INFINITY) {
    if (threadIdx.x == 0) {
      result.status = DeviceSampleStatus::kHostRow;
      results[blockIdx.x] = result;
    }
    return;
  }
  const float inv_t = 1.0f / r.temperature;
  const auto weight = [work, max_work, inv_t](int i) { return expf((work[i] - max_work) * inv_t); };

  if (r.mode == DeviceSampleMode::kFull) {
    double total = 0.0;
    const int token = draw_in_id_order(n, weight, r.u, total, s);
    if (threadIdx.x == 0) {
      result.token = token;
      result.total = total;
      if (token < 0) result.status = DeviceSampleStatus::kHostRow;
      result.chosen_raw = token >= 0 ? raw[token] : 0.0f;
      results[blockIdx.x] = result;
    }
    return;
  }

  double total = 0.0;
  int count = 0;
  // The row's own slot of the candidate pool: what a row collects does not depend on the
  // other rows of the step.
  DeviceCandidate* slot = pool + static_cast<std::size_t>(blockIdx.x) * kCap;
  // kTopK: the weights of the top-k set (tokens at or above the k-th largest logit), -1
  // elsewhere; kFloor: every token's weight.
  float kth = -FLT_MAX;
  if (r.mode == DeviceSampleMode::kTopK) {
    kth = kth_largest(work, n, r.top_k, s);
    if (kth == -INFINITY) kth = -FLT_MAX;  // fewer than k finite: every finite token
  }
  const auto in_top_k = [work, kth, weight](int i) { return work[i] >= kth ? weight(i) : -1.0f; };
  if (r.mode == DeviceSampleMode::kTopK) {
    count = collect(raw, n, 0.0f, in_top_k, slot, kCap, total, s);
  } else {
    double sum = 0.0;
    for (int i = threadIdx.x; i < n; i += kThreads)
      sum += weight(i);
    total = block_sum(sum, s);
    float safe = fmaxf(r.min_p, FLT_TRUE_MIN);
    float tight = safe;
    if (r.top_p < 1.0f) {
      const double tail = (1.0 - static_cast<double>(r.top_p)) * total;
      safe = fmaxf(safe, static_cast<float>(tail / static_cast<double>(n)));
      tight = fmaxf(safe, static_cast<float>(tail / 256.0));
    }
    double mass = 0.0;
    count = collect(raw, n, tight, weight, slot, kCap, mass, s);
    if (tight > safe && mass < static_cast<double>(r.top_p) * total) {
      count = collect(raw, n, safe, weight, slot, kCap, mass, s);
    }
  }
  const bool fits = count <= kCap;
  if (!fits && r.flags == 0) {
    // Too many candidates for the host: top-p and min-p (over the top-k set) on the device.
    double survivors = 0.0;
    const auto kept = [in_top_k](int i) { return fmaxf(in_top_k(i), 0.0f); };
    const int token = top_p_draw(n, kept, work, r, total, survivors, s);
    if (threadIdx.x == 0) {
      result.token = token;
      result.total = survivors;
      if (token < 0) result.status = DeviceSampleStatus::kHostRow;
      result.chosen_raw = token >= 0 ? raw[token] : 0.0f;
      results[blockIdx.x] = result;
    }
    return;
  }
  if (threadIdx.x == 0) {
    if (!fits) result.status = DeviceSampleStatus::kHostRow;
    result.candidates = count;
    result.offset = fits ? static_cast<int>(blockIdx.x) * kCap : -1;
    result.total = total;
    results[blockIdx.x] = result;
  }
}

}  // namespace

void sample_rows(const SampleArgs& a, cudaStream_t stream) {
  if (a.num_rows <= 0) return;
  sample_kernel<<<a.num_rows, kThreads, 0, stream>>>(a.rows, a.logits, a.work, a.vocab, a.edits,
                                                     a.masks, a.results, a.candidates, a.top);
}

}  // namespace weft::cuda
