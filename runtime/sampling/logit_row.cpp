#include "runtime/sampling/logit_row.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <limits>

// The vector helpers are always inlined into their AVX2 or SSE caller, so the ABI note GCC
// gives for 32-byte vectors passed by value does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace weft::sampling {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Passes read blocks of 32 entries: 4 AVX2 vectors or 8 SSE vectors, each lane accumulating
// the same entries in the same order on either, so a seed gives the same tokens on both.
constexpr std::size_t kBlock = 32;

// GCC vector types: the same source becomes SSE or AVX2 code without relying on the
// auto-vectoriser (which gives up on the selects below without -ffast-math).
using F4 = float __attribute__((vector_size(16)));
using I4 = std::int32_t __attribute__((vector_size(16)));
using F8 = float __attribute__((vector_size(32)));
using I8 = std::int32_t __attribute__((vector_size(32)));
template <class F>
struct IntOf;
template <>
struct IntOf<F4> {
  using type = I4;
};
template <>
struct IntOf<F8> {
  using type = I8;
};

#define WEFT_INLINE inline __attribute__((always_inline))

template <class F>
WEFT_INLINE F load(const float* p) {
  F v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
template <class F>
WEFT_INLINE F splat(float v) {
  return F{} + v;
}
template <class F>
constexpr std::size_t lanes = sizeof(F) / sizeof(float);

// exp(t) to about 2 ulp (Cephes expf): t = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial
// for exp(r), 2^n built in the exponent bits. Below -87 the result is exactly 0, so masked
// (-inf) tokens get no mass at all. Each step runs over K independent vectors before the
// next, so the CPU overlaps K dependency chains instead of waiting on one Horner chain.
template <class F, std::size_t K>
WEFT_INLINE void exp_pack(F (&t)[K]) {
  using I = typename IntOf<F>::type;
  I underflow[K];
  F n[K], r[K], p[K];
  for (std::size_t k = 0; k < K; ++k) {
    underflow[k] = t[k] < splat<F>(-87.0f);
    t[k] = underflow[k] ? splat<F>(-87.0f) : t[k];
    t[k] = t[k] > splat<F>(88.0f) ? splat<F>(88.0f) : t[k];
    n[k] = t[k] * 1.44269504088896341f;
  }
  for (std::size_t k = 0; k < K; ++k) {  // round to nearest: 1.5 * 2^23 leaves no fraction bits
    n[k] = (n[k] + 12582912.0f) - 12582912.0f;
  }
  for (std::size_t k = 0; k < K; ++k) {
    r[k] = t[k] - n[k] * 0.693359375f;
  }
  for (std::size_t k = 0; k < K; ++k) {
    r[k] = r[k] - n[k] * -2.12194440e-4f;
  }
  for (std::size_t k = 0; k < K; ++k) {
    p[k] = r[k] * 1.9875691500e-4f + 1.3981999507e-3f;
  }
  for (const float c : {8.3334519073e-3f, 4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f}) {
    for (std::size_t k = 0; k < K; ++k) {
      p[k] = p[k] * r[k] + c;
    }
  }
  for (std::size_t k = 0; k < K; ++k) {
    p[k] = p[k] * r[k] * r[k] + r[k] + 1.0f;
    const I bits = (__builtin_convertvector(n[k], I) + 127) << 23;
    const F result = p[k] * std::bit_cast<F>(bits);
    t[k] = underflow[k] ? F{} : result;
  }
}

template <class F, bool kWrite>
WEFT_INLINE double sum_exp_impl(const float* x, std::size_t n, float shift, float scale,
                                float* out) {
  constexpr std::size_t kW = lanes<F>, kVecs = kBlock / kW;
  F acc[kVecs] = {};
  const F vshift = splat<F>(shift), vscale = splat<F>(scale);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    F e[kVecs];
    for (std::size_t v = 0; v < kVecs; ++v) {
      e[v] = (load<F>(x + i + v * kW) - vshift) * vscale;
    }
    exp_pack(e);
    for (std::size_t v = 0; v < kVecs; ++v) {
      if constexpr (kWrite) {
        std::memcpy(out + i + v * kW, &e[v], sizeof e[v]);
      }
      acc[v] += e[v];
    }
  }
  double total = 0.0;
  for (std::size_t q = 0; q < kBlock / 2; ++q) {
    const std::size_t hi = q + kBlock / 2;
    total += static_cast<double>(acc[q / kW][q % kW]) + acc[hi / kW][hi % kW];
  }
  for (; i < n; ++i) {
    F4 e[1] = {splat<F4>((x[i] - shift) * scale)};
    exp_pack(e);
    if constexpr (kWrite) {
      out[i] = e[0][0];
    }
    total += e[0][0];
  }
  return total;
}

template <class F>
WEFT_INLINE RowMax row_max_impl(const float* x, std::size_t n) {
  using I = typename IntOf<F>::type;
  constexpr std::size_t kW = lanes<F>, kVecs = kBlock / kW;
  // Independent accumulators: one compare-and-select chain would bound the pass by latency.
  F m[kVecs];
  I bad[kVecs] = {};
  for (auto& v : m) {
    v = splat<F>(-kInf);
  }
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t v = 0; v < kVecs; ++v) {
      const F e = load<F>(x + i + v * kW);
      m[v] = e > m[v] ? e : m[v];
      bad[v] |= ~(e < splat<F>(kInf));  // NaN or +inf
    }
  }
  RowMax out{-kInf, false};
  for (std::size_t v = 0; v < kVecs; ++v) {
    for (std::size_t j = 0; j < kW; ++j) {
      out.max = m[v][j] > out.max ? m[v][j] : out.max;
      out.non_finite |= bad[v][j] != 0;
    }
  }
  for (; i < n; ++i) {
    out.max = x[i] > out.max ? x[i] : out.max;
    out.non_finite |= !(x[i] < kInf);
  }
  return out;
}

__attribute__((target("avx2"))) double sum_exp_avx2(const float* x, std::size_t n, float shift,
                                                    float scale, float* out) {
  return out ? sum_exp_impl<F8, true>(x, n, shift, scale, out)
             : sum_exp_impl<F8, false>(x, n, shift, scale, nullptr);
}
double sum_exp_sse(const float* x, std::size_t n, float shift, float scale, float* out) {
  return out ? sum_exp_impl<F4, true>(x, n, shift, scale, out)
             : sum_exp_impl<F4, false>(x, n, shift, scale, nullptr);
}
__attribute__((target("avx2"))) RowMax row_max_avx2(const float* x, std::size_t n) {
  return row_max_impl<F8>(x, n);
}
RowMax row_max_sse(const float* x, std::size_t n) {
  return row_max_impl<F4>(x, n);
}

bool has_avx2() {
#if defined(__x86_64__)
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return avx2;
#else
  return false;
#endif
}

// The largest of x[0, 32), for the scans that skip whole blocks.
WEFT_INLINE float block_max(const float* x) {
  F4 m = load<F4>(x);
  for (std::size_t v = 1; v < kBlock / 4; ++v) {
    const F4 b = load<F4>(x + 4 * v);
    m = b > m ? b : m;
  }
  float best = m[0];
  for (std::size_t j = 1; j < 4; ++j) {
    best = m[j] > best ? m[j] : best;
  }
  return best;
}

}  // namespace

RowMax row_max(const float* x, std::size_t n) noexcept {
  return has_avx2() ? row_max_avx2(x, n) : row_max_sse(x, n);
}

std::size_t find_non_finite(const float* x, std::size_t n) noexcept {
  return static_cast<std::size_t>(std::find_if(x, x + n, [](float v) { return !(v < kInf); }) - x);
}

double sum_exp(const float* x, std::size_t n, float shift, float scale, float* out) noexcept {
  return has_avx2() ? sum_exp_avx2(x, n, shift, scale, out) : sum_exp_sse(x, n, shift, scale, out);
}

std::int32_t argmax(const float* x, std::size_t n, float max) noexcept {
  const float m = max == max ? max : row_max(x, n).max;
  // Whole blocks first: the first block holding the maximum is found with vector compares.
  const F4 vm = splat<F4>(m);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    I4 hit{};
    for (std::size_t v = 0; v < kBlock / 4; ++v) {
      hit |= load<F4>(x + i + 4 * v) == vm;
    }
    if ((hit[0] | hit[1] | hit[2] | hit[3]) != 0) {
      break;
    }
  }
  return static_cast<std::int32_t>(std::find(x + i, x + n, m) - x);
}

float kth_largest(const float* x, std::size_t n, int k) {
  if (k <= 0) {
    return kInf;
  }
  const auto kk = static_cast<std::size_t>(k);
  if (kk > n) {
    return -kInf;
  }
  if (kk > n / 8) {
    // A large k keeps a heap too big to skip blocks; selection over a copy is linear.
    std::vector<float> copy(x, x + n);
    std::nth_element(copy.begin(), copy.begin() + static_cast<std::ptrdiff_t>(kk - 1), copy.end(),
                     std::greater<>());
    return copy[kk - 1];
  }
  // Min-heap of the k largest so far, primed with -inf so entries beyond the finite ones
  // leave -inf on top.
  std::vector<float> heap(kk, -kInf);
  const auto offer = [&](float v) {
    if (v > heap.front()) {
      std::pop_heap(heap.begin(), heap.end(), std::greater<>());
      heap.back() = v;
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  };
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    if (block_max(x + i) <= heap.front()) {
      continue;
    }
    for (std::size_t j = 0; j < kBlock; ++j) {
      offer(x[i + j]);
    }
  }
  for (; i < n; ++i) {
    offer(x[i]);
  }
  return heap.front();
}

std::vector<TokenLogprob> top_entries(const float* x, std::size_t n, int k) {
  std::vector<TokenLogprob> heap;  // worst on top: smallest value, then largest id
  if (k <= 0) {
    return heap;
  }
  const auto kk = static_cast<std::size_t>(k);
  heap.reserve(kk);
  const auto worse = [](const TokenLogprob& a, const TokenLogprob& b) {
    return a.logprob > b.logprob || (a.logprob == b.logprob && a.id < b.id);
  };
  // Ids arrive in increasing order, so an equal value never displaces an earlier id.
  const auto offer = [&](std::size_t i) {
    const float v = x[i];
    if (heap.size() < kk) {
      if (v == -kInf) {
        return;
      }
      heap.push_back({static_cast<std::int32_t>(i), v});
      std::push_heap(heap.begin(), heap.end(), worse);
    } else if (v > heap.front().logprob) {
      std::pop_heap(heap.begin(), heap.end(), worse);
      heap.back() = {static_cast<std::int32_t>(i), v};
      std::push_heap(heap.begin(), heap.end(), worse);
    }
  };
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    if (heap.size() == kk && block_max(x + i) <= heap.front().logprob) {
      continue;
    }
    for (std::size_t j = 0; j < kBlock; ++j) {
      offer(i + j);
    }
  }
  for (; i < n; ++i) {
    offer(i);
  }
  std::sort_heap(heap.begin(), heap.end(), worse);
  return heap;
}

void collect_at_least(const float* x, std::size_t n, float threshold,
                      std::vector<std::int32_t>& ids) {
  const F4 t = splat<F4>(threshold);
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    // One bit per entry of the block that passes, then only those entries are visited.
    unsigned bits = 0;
    for (std::size_t v = 0; v < kBlock / 4; ++v) {
      const F4 pass = std::bit_cast<F4>(load<F4>(x + i + 4 * v) >= t);
      bits |= static_cast<unsigned>(_mm_movemask_ps(std::bit_cast<__m128>(pass))) << (4 * v);
    }
    for (; bits != 0; bits &= bits - 1) {
      ids.push_back(
          static_cast<std::int32_t>(i + static_cast<std::size_t>(std::countr_zero(bits))));
    }
  }
  for (; i < n; ++i) {
    if (x[i] >= threshold) {
      ids.push_back(static_cast<std::int32_t>(i));
    }
  }
}

std::int32_t inverse_cdf(const float* w, std::size_t n, double target) noexcept {
  double cumulative = 0.0;
  std::size_t i = 0;
  // Whole blocks first: most of the row lies before the drawn token.
  for (; i + kBlock <= n; i += kBlock) {
    F4 sum = load<F4>(w + i);
    for (std::size_t v = 1; v < kBlock / 4; ++v) {
      sum += load<F4>(w + i + 4 * v);
    }
    const double block = static_cast<double>(sum[0]) + sum[1] + sum[2] + sum[3];
    if (cumulative + block > target) {
      break;
    }
    cumulative += block;
  }
  std::int32_t last = -1;
  for (; i < n; ++i) {
    if (w[i] <= 0.0f) {
      continue;
    }
    cumulative += w[i];
    last = static_cast<std::int32_t>(i);
    if (cumulative > target) {
      return last;
    }
  }
  if (last >= 0) {
    return last;
  }
  // Rounding left the target beyond the end: the last token with weight absorbs it.
  for (std::size_t j = n; j-- > 0;) {
    if (w[j] > 0.0f) {
      return static_cast<std::int32_t>(j);
    }
  }
  return 0;
}

std::size_t apply_token_bitmask(float* x, std::size_t n, const std::uint32_t* allowed) noexcept {
  std::size_t count = 0;
  for (std::size_t word = 0; word * 32 < n; ++word) {
    const std::size_t base = word * 32;
    const std::size_t width = std::min<std::size_t>(32, n - base);
    const std::uint32_t valid = width == 32 ? ~0u : (1u << width) - 1u;
    const std::uint32_t bits = allowed[word] & valid;
    count += static_cast<std::size_t>(std::popcount(bits));
    for (std::uint32_t blocked = ~bits & valid; blocked != 0; blocked &= blocked - 1) {
      x[base + static_cast<std::size_t>(std::countr_zero(blocked))] = -kInf;
    }
  }
  return count;
}

}  // namespace weft::sampling
