#pragma once
// Helpers of the decode attention tests (cuda_decode_attention_test.cpp,
// cuda_decode_attention_stream_test.cpp): a decode batch over shuffled KV pages with its CPU
// reference, the comparison of outputs, and the fused-rope check, for any of the decode
// kernels (DecodeAttentionKernel).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/rope.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

template <class T>
using Dev = test_support::DeviceArray<T>;

using Half = std::uint16_t;

std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

// The 16-bit values of v on the device, and (rounded) what they hold as floats.
std::unique_ptr<Dev<Half>> to_half(const std::vector<float>& v, Precision p,
                                   std::vector<float>* rounded) {
  Dev<float> f(v);
  auto h = std::make_unique<Dev<Half>>(v.size());
  convert_to_precision(f.get(), SourceType::kF32, h->get(), p, v.size(), nullptr);
  if (rounded != nullptr) {
    Dev<float> back(v.size());
    convert_to_f32(h->get(), p, back.get(), v.size(), nullptr);
    *rounded = back.download();
  }
  return h;
}

std::vector<float> to_float(const std::vector<Half>& h, Precision p) {
  Dev<Half> d(h);
  Dev<float> f(h.size());
  convert_to_f32(d.get(), p, f.get(), h.size(), nullptr);
  return f.download();
}

double rounding(Precision p) {
  return p == Precision::kBF16 ? 1.0 / 128 : 1.0 / 1024;
}

// |got - want| <= rel * |want| + abs_tol elementwise; reports the worst element.
void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, double rel,
                     double abs_tol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double excess = std::fabs(got[i] - want[i]) - (rel * std::fabs(want[i]) + abs_tol);
    if (excess > worst || !std::isfinite(got[i])) {
      worst = std::isfinite(got[i]) ? excess : 1e30;
      at = i;
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": element " << at << " got " << got[at] << " want " << want[at];
}

struct Shape {
  int heads, kv_heads, dim, page_size;
};

// A decode batch: sequence s has contexts[s] positions in its own shuffled pages of a pool
// shared by all (2 layers; layer 1 is read), and one query token at its last position.
struct DecodeBatch {
  Shape shape;
  Precision p;
  int window;
  int segment_keys = 0;  // AttentionArgs::segment_keys of run()
  std::vector<int> contexts;
  static constexpr int kLayers = 2, kLayer = 1;

  std::size_t page_elems() const {
    return 2ull * kLayers * shape.kv_heads * shape.page_size * shape.dim;
  }

  DecodeBatch(Shape s, Precision precision, int w, std::vector<int> ctx, std::mt19937& rng)
      : shape(s), p(precision), window(w), contexts(std::move(ctx)) {
    const int S = static_cast<int>(contexts.size());
    int pages = 3;  // a few pages nobody uses
    for (int c : contexts)
      pages += (c + s.page_size - 1) / s.page_size;
    std::vector<std::int32_t> ids(pages);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    int next = 0;
    for (int sq = 0; sq < S; ++sq) {
      table_begin.push_back(static_cast<std::int32_t>(page_ids.size()));
      const int need = (contexts[sq] + s.page_size - 1) / s.page_size;
      page_ids.insert(page_ids.end(), ids.begin() + next, ids.begin() + next + need);
      next += need;
      positions.push_back(contexts[sq] - 1);
      token_seq.push_back(sq);
    }
    pool_pages = pages;
    pool0 = random_vector(page_elems() * pages, rng);
    q = random_vector(static_cast<std::size_t>(S) * s.heads * s.dim, rng);
  }

  int max_context() const { return *std::max_element(contexts.begin(), contexts.end()); }

  // The kernel's output for the query tokens `queries` (indices into the batch), as 16 bits.
  std::vector<Half> run(DecodeAttentionKernel kernel, int parts,
                        const std::vector<std::int32_t>& queries) const {
    set_decode_attention_kernel(kernel);
    set_decode_attention_parts(parts);
    const int S = static_cast<int>(contexts.size()), NH = shape.heads, D = shape.dim;
    auto pool = to_half(pool0, p, nullptr);
    Dev<float> dq(q);
    Dev<std::int32_t> dpos(positions), dseq(token_seq), dpages(page_ids), dbegin(table_begin);
    Dev<std::int32_t> dqueries(queries);
    Dev<Half> out(static_cast<std::size_t>(S) * NH * D);
    cudaMemset(out.get(), 0, static_cast<std::size_t>(S) * NH * D * sizeof(Half));
    FlatBatchView fb{dpos.get(), dseq.get(), dbegin.get(), dpages.get(), S};
    PagedKvView kv{pool->get(),
                   p,
                   page_elems(),
                   static_cast<std::size_t>(kLayer) * page_elems() / kLayers,
                   shape.page_size,
                   shape.kv_heads,
                   D};
    AttentionArgs a;
    a.q = dq.get();
    a.q_stride = static_cast<std::size_t>(NH) * D;
    a.num_heads = NH;
    a.scale = 1.0f / std::sqrt(static_cast<float>(D));
    a.sliding_window = window;
    a.out = out.get();
    a.segment_keys = segment_keys;
    int context = 0;
    for (int qi : queries)
      context = std::max(context, contexts[qi]);
    const int nq = static_cast<int>(queries.size());
    Dev<float> work(std::max<std::size_t>(1, decode_workspace_floats(nq, NH, D, context)));
    decode_attention(a, fb, kv, dqueries.get(), nq, context, work.get(), nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    return out.download();
  }

  std::vector<float> cpu_reference() const {
    std::vector<float> pool_r;
    to_half(pool0, p, &pool_r);
    const int NH = shape.heads, D = shape.dim;
    std::vector<float> want(q.size());
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    for (std::size_t t = 0; t < contexts.size(); ++t) {
      std::vector<const void*> blocks;
      const int need = (contexts[t] + shape.page_size - 1) / shape.page_size;
      for (int i = 0; i < need; ++i)
        blocks.push_back(pool_r.data() + page_ids[table_begin[t] + i] * page_elems() +
                         static_cast<std::size_t>(kLayer) * page_elems() / kLayers);
      const cpu::PagedKv view{blocks.data(), static_cast<std::size_t>(shape.page_size),
                              static_cast<std::size_t>(shape.kv_heads),
                              static_cast<std::size_t>(D)};
      const int pos = positions[t];
      const int first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
      std::vector<float> scratch(pos + 1);
      cpu::paged_attention(q.data() + t * NH * D, NH, view, first, pos, scale,
                           want.data() + t * NH * D, scratch.data());
    }
    return want;
  }

  std::vector<float> q, pool0;
  std::vector<std::int32_t> positions, token_seq, page_ids, table_begin;
  int pool_pages = 0;
};

class CudaDecodeAttention : public test_support::PrecisionTest {
 protected:
  void SetUp() override {
    PrecisionTest::SetUp();
    if (IsSkipped()) return;
    kernel_ = decode_attention_kernel();
    parts_ = decode_attention_parts();
  }
  void TearDown() override {
    set_decode_attention_kernel(kernel_);
    set_decode_attention_parts(parts_);
  }

 private:
  DecodeAttentionKernel kernel_ = DecodeAttentionKernel::kSplit;
  int parts_ = 0;
};

std::string describe(const DecodeBatch& b) {
  return "heads " + std::to_string(b.shape.heads) + "/" + std::to_string(b.shape.kv_heads) +
         " head_dim " + std::to_string(b.shape.dim) + " page " + std::to_string(b.shape.page_size) +
         " batch " + std::to_string(b.contexts.size()) + " longest " +
         std::to_string(b.max_context()) + " window " + std::to_string(b.window);
}

std::vector<std::int32_t> all_queries(const DecodeBatch& b) {
  std::vector<std::int32_t> queries(b.contexts.size());
  std::iota(queries.begin(), queries.end(), 0);
  return queries;
}

// Contexts of `n` sequences cycling from the longest length up to `longest` down through
// lengths that are not page multiples: splits of three and two tiles, one-tile splits, one
// split of several tiles, a single tile.
std::vector<int> contexts_for(int n, int longest) {
  static const int lengths[] = {6000, 4100, 2100, 2049, 1300, 700, 513, 130, 65, 63, 17, 1};
  std::vector<int> usable;
  for (int c : lengths)
    if (c <= longest) usable.push_back(c);
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    out.push_back(usable[i % usable.size()]);
  return out;
}

struct Case {
  Shape shape;
  int batch, longest, window;
};

// `kernel` against the CPU reference and the per-split kernel: within the per-split kernel's
// bound against the CPU, and at most one 16-bit rounding step from the per-split kernel (the
// kernels sum the same products in other orders, or combine the splits otherwise, in fp32).
inline void expect_matches_cpu_and_split(DecodeAttentionKernel kernel, const DecodeBatch& b,
                                         Precision p, const std::string& what) {
  const auto queries = all_queries(b);
  const auto got = b.run(kernel, 0, queries);
  const auto old = b.run(DecodeAttentionKernel::kSplit, 0, queries);
  const auto got_f = to_float(got, p), old_f = to_float(old, p);
  expect_near_all(got_f, b.cpu_reference(), 2 * rounding(p), 2e-3, what + " vs cpu");
  expect_near_all(got_f, old_f, rounding(p), 1e-5, what + " vs the per-split kernel");
}

// However the launch of `kernel` cuts the contexts into parts (one part: the block folds its
// splits itself; several: split records and the combine kernel), and whatever runs beside a
// token (each of `alone` run by itself), its output has the same bits.
inline void expect_bitwise_for_every_cut_and_batch(DecodeAttentionKernel kernel,
                                                   const DecodeBatch& b,
                                                   const std::vector<int>& alone) {
  const auto queries = all_queries(b);
  const auto automatic = b.run(kernel, 0, queries);
  for (int parts : {1, 2, 3, 7, 32}) {
    EXPECT_TRUE(b.run(kernel, parts, queries) == automatic)
        << describe(b) << ": " << parts << " parts differ from the automatic cut";
  }
  const std::size_t row = static_cast<std::size_t>(b.shape.heads) * b.shape.dim;
  for (int qi : alone) {
    const auto one = b.run(kernel, 0, {qi});
    EXPECT_TRUE(std::equal(one.begin() + qi * row, one.begin() + (qi + 1) * row,
                           automatic.begin() + qi * row))
        << describe(b) << ": token " << qi << " (context " << b.contexts[qi]
        << ") alone differs from the batch";
  }
}

// A shape `kernel` does not serve keeps its kernel when `kernel` is selected: the same bits as
// with the per-split choice.
inline void expect_same_as_split(DecodeAttentionKernel kernel, const Shape& shape, Precision p,
                                 unsigned seed) {
  std::mt19937 rng(seed);
  const DecodeBatch b(shape, p, 0, contexts_for(5, 700), rng);
  const auto queries = all_queries(b);
  EXPECT_TRUE(b.run(kernel, 0, queries) == b.run(DecodeAttentionKernel::kSplit, 0, queries))
      << describe(b);
}

// With AttentionArgs::rope_inv_freq, `kernel` rotates q and the token's key and stores its
// key and value: bitwise rope_store_kv followed by the kernel, outputs and pages, for tokens
// whose own position is in a first tile, a later tile and a later part.
inline void expect_rope_fusion_is_bitwise(DecodeAttentionKernel kernel, Precision p) {
  for (const Shape& shape : {Shape{32, 8, 128, 16}, Shape{6, 2, 64, 3}, Shape{4, 4, 256, 5}}) {
    for (int parts : {0, 1, 4}) {
      for (int window : {0, 100}) {
        std::mt19937 rng(17 + shape.dim + parts + window);
        const std::vector<int> contexts{700, 1, 40, 2100, 65};
        const int S = static_cast<int>(contexts.size());
        const int NH = shape.heads, NKV = shape.kv_heads, D = shape.dim;
        const int width = (NH + 2 * NKV) * D;
        DecodeBatch b(shape, p, window, contexts, rng);
        std::vector<float> inv_freq(static_cast<std::size_t>(S) * D / 2), factor(S);
        for (int sq = 0; sq < S; ++sq) {
          factor[sq] = 1.0f - 0.0625f * sq;
          for (int j = 0; j < D / 2; ++j)
            inv_freq[sq * D / 2 + j] = std::pow(500000.0f + 1000.0f * sq, -2.0f * j / D);
        }
        const auto qkv0 = random_vector(static_cast<std::size_t>(S) * width, rng);
        Dev<std::int32_t> dpos(b.positions), dseq(b.token_seq), dpages(b.page_ids),
            dbegin(b.table_begin);
        Dev<float> dfreq(inv_freq), dfactor(factor);
        const auto queries = all_queries(b);
        Dev<std::int32_t> dqueries(queries);
        FlatBatchView fb{dpos.get(), dseq.get(), dbegin.get(), dpages.get(), S};
        set_decode_attention_kernel(kernel);
        set_decode_attention_parts(parts);
        std::vector<Half> outs[2], pools[2];
        for (int fused = 0; fused < 2; ++fused) {
          auto pool = to_half(b.pool0, p, nullptr);
          Dev<float> qkv(qkv0);
          Dev<Half> out(static_cast<std::size_t>(S) * NH * D);
          Dev<float> work(
              std::max<std::size_t>(1, decode_workspace_floats(S, NH, D, b.max_context())));
          PagedKvView kv{
              pool->get(),
              p,
              b.page_elems(),
              static_cast<std::size_t>(DecodeBatch::kLayer) * b.page_elems() / DecodeBatch::kLayers,
              shape.page_size,
              NKV,
              D};
          AttentionArgs a;
          a.q = qkv.get();
          a.q_stride = static_cast<std::size_t>(width);
          a.num_heads = NH;
          a.scale = 1.0f / std::sqrt(static_cast<float>(D));
          a.sliding_window = window;
          a.out = out.get();
          if (fused) {
            a.rope_inv_freq = dfreq.get();
            a.rope_factor = dfactor.get();
          } else {
            RopeArgs r;
            r.qkv = qkv.get();
            r.num_heads = NH;
            r.rotary_dim = D;
            r.inv_freq = dfreq.get();
            r.attention_factor = dfactor.get();
            rope_store_kv(r, fb, kv, nullptr);
          }
          decode_attention(a, fb, kv, dqueries.get(), S, b.max_context(), work.get(), nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          outs[fused] = out.download();
          pools[fused] = pool->download();
        }
        const std::string what = describe(b) + " parts " + std::to_string(parts);
        EXPECT_TRUE(outs[0] == outs[1]) << what << ": attention outputs differ";
        EXPECT_TRUE(pools[0] == pools[1]) << what << ": KV pages differ";
      }
    }
  }
}

}  // namespace
}  // namespace weft::cuda
