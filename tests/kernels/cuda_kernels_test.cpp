// Each CUDA kernel against the CPU kernel of the same name on random inputs of awkward sizes,
// in bf16 and fp16. Inputs are rounded to the 16-bit type first (on the device) so both sides
// see the same numbers; what remains is the rounding of 16-bit outputs and fp32 summation
// order. Skips on machines without a GPU (scripts/gpu-check runs it on the device machine).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/activation.hpp"
#include "kernels/cpu/matmul.hpp"
#include "kernels/cpu/norm.hpp"
#include "kernels/cpu/paged_attention.hpp"
#include "kernels/cpu/rope.hpp"
#include "kernels/cpu/vector_math.hpp"
#include "kernels/cuda/activation.hpp"
#include "kernels/cuda/convert.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/embedding.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gemv.hpp"
#include "kernels/cuda/l2_prefetch.hpp"
#include "kernels/cuda/norm.hpp"
#include "kernels/cuda/paged_attention.hpp"
#include "kernels/cuda/rope.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

template <class T>
using Dev = test_support::DeviceArray<T>;

// A device array, freed at scope exit.
using Half = std::uint16_t;  // a 16-bit element as the host sees it

// Uploads fp32 values as a 16-bit device array; `rounded` gets the values it holds.
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

std::vector<float> from_half(const Dev<Half>& h, std::size_t n, Precision p) {
  Dev<float> f(n);
  convert_to_f32(h.get(), p, f.get(), n, nullptr);
  return f.download();
}

using test_support::random_vector;

// Relative error bound for a value rounded to the precision once: half an ulp plus slack for
// fp32 summation order.
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

// add_norm's arguments for the tests below: `rows` output rows of n (the rows of `pick` when
// given, without writing the sum back; else every row, writing it back), eps 1e-5, the bias
// for LayerNorm only.
AddNormArgs norm_args(float* residual, const float* delta, const float* delta_bias,
                      const std::int32_t* pick, int rows, int n, NormKind kind, const float* weight,
                      const float* bias, void* out, Precision p) {
  AddNormArgs a;
  a.residual = residual;
  a.delta = delta;
  a.delta_bias = delta_bias;
  a.row_index = pick;
  a.rows = rows;
  a.n = n;
  a.kind = kind;
  a.weight = weight;
  a.bias = kind == NormKind::kLayer ? bias : nullptr;
  a.eps = 1e-5f;
  a.write_back = pick == nullptr;
  a.out = out;
  a.precision = p;
  return a;
}

using CudaKernels = test_support::PrecisionTest;

TEST_P(CudaKernels, EmbeddingGatherCopiesRows) {
  std::mt19937 rng(1);
  const int vocab = 37, hidden = 77;
  std::vector<float> table_r;
  auto table = to_half(random_vector(vocab * hidden, rng), p(), &table_r);
  const std::vector<std::int32_t> tokens{5, 0, 36, 5, 12};
  Dev<std::int32_t> tok(tokens);
  Dev<float> out(tokens.size() * hidden);
  embedding_gather(table->get(), p(), tok.get(), static_cast<int>(tokens.size()), hidden, out.get(),
                   nullptr);
  std::vector<float> want;
  for (int t : tokens)
    want.insert(want.end(), table_r.begin() + t * hidden, table_r.begin() + (t + 1) * hidden);
  EXPECT_EQ(out.download(), want);
}

TEST_P(CudaKernels, AddNormMatchesCpuNormsWithResidualBiasAndRowSelection) {
  std::mt19937 rng(2);
  const int rows = 5, n = 1000;
  for (NormKind kind : {NormKind::kRms, NormKind::kLayer}) {
    const auto x0 = random_vector(rows * n, rng, 2.0f), delta = random_vector(rows * n, rng);
    const auto dbias = random_vector(n, rng, 0.1f), weight = random_vector(n, rng);
    const auto bias = random_vector(n, rng);
    std::vector<float> summed(rows * n);
    for (int i = 0; i < rows * n; ++i)
      summed[i] = x0[i] + (delta[i] + dbias[i % n]);
    // Rows 3, 0 and 4 only, without writing the sum back; then every row, writing it back.
    const std::vector<std::int32_t> pick{3, 0, 4};
    for (bool select : {true, false}) {
      Dev<float> x(x0), d(delta), db(dbias), w(weight), b(bias);
      Dev<std::int32_t> idx(pick);
      const int out_rows = select ? 3 : rows;
      Dev<Half> out(static_cast<std::size_t>(out_rows) * n);
      add_norm(norm_args(x.get(), d.get(), db.get(), select ? idx.get() : nullptr, out_rows, n,
                         kind, w.get(), b.get(), out.get(), p()),
               nullptr);
      std::vector<float> want(static_cast<std::size_t>(rows) * n);
      if (kind == NormKind::kRms) {
        cpu::rms_norm(summed.data(), rows, n, weight.data(), 1e-5f, want.data());
      } else {
        cpu::layer_norm(summed.data(), rows, n, weight.data(), bias.data(), 1e-5f, want.data());
      }
      std::vector<float> want_rows;
      for (int r = 0; r < out_rows; ++r) {
        const int src = select ? pick[r] : r;
        want_rows.insert(want_rows.end(), want.begin() + src * n, want.begin() + (src + 1) * n);
      }
      expect_near_all(from_half(out, want_rows.size(), p()), want_rows, rounding(p()), 1e-4,
                      select ? "selected rows" : "all rows");
      expect_near_all(x.download(), select ? x0 : summed, 0, 1e-5, "residual");
    }
  }
}

// A 16-bit delta (delta16: a bf16 all-reduce's sums under tensor parallelism) gives bitwise
// the results of the fp32 delta holding its widened values on the kernels add_norm picks for
// rows of up to 4096 (add_norm_delta16_exact): the vectorized one (n = 1024) and the register
// one (n = 1000); the generic one (n = 5000) within a rounding of the output (its compiled
// code rounded 2 of 20,000 fp16 LayerNorm outputs 1 ulp apart on an H100), the residual
// bitwise. With and without row selection, RMS and LayerNorm.
TEST_P(CudaKernels, AddNormReadsA16BitDeltaAsItsWidenedValues) {
  std::mt19937 rng(12);
  const int rows = 4;
  for (int n : {1024, 1000, 5000}) {
    for (NormKind kind : {NormKind::kRms, NormKind::kLayer}) {
      const auto x0 = random_vector(rows * n, rng, 2.0f), dbias = random_vector(n, rng, 0.1f);
      const auto weight = random_vector(n, rng), bias = random_vector(n, rng);
      std::vector<float> widened;
      auto d16 = to_half(random_vector(rows * n, rng), p(), &widened);
      const std::vector<std::int32_t> pick{2, 0};
      for (bool select : {true, false}) {
        const int out_rows = select ? 2 : rows;
        std::vector<float> outs[2], residuals[2];
        for (int sixteen = 0; sixteen < 2; ++sixteen) {
          Dev<float> x(x0), d(widened), db(dbias), w(weight), b(bias);
          Dev<std::int32_t> idx(pick);
          Dev<Half> out(static_cast<std::size_t>(out_rows) * n);
          AddNormArgs a = norm_args(x.get(), sixteen ? nullptr : d.get(), db.get(),
                                    select ? idx.get() : nullptr, out_rows, n, kind, w.get(),
                                    b.get(), out.get(), p());
          a.delta16 = sixteen ? d16->get() : nullptr;
          add_norm(a, nullptr);
          outs[sixteen] = from_half(out, static_cast<std::size_t>(out_rows) * n, p());
          residuals[sixteen] = x.download();
        }
        const std::string what = "n " + std::to_string(n) + (select ? ", selected rows" : "") +
                                 (kind == NormKind::kRms ? ", RMS" : ", LayerNorm");
        for (int k = 0; k < 2; ++k) {
          const auto& got = k == 0 ? outs[1] : residuals[1];
          const auto& want = k == 0 ? outs[0] : residuals[0];
          ASSERT_EQ(got.size(), want.size()) << what;
          std::size_t differ = 0, first = 0;
          for (std::size_t i = 0; i < got.size(); ++i) {
            if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && differ++ == 0) first = i;
          }
          if (k == 0 && !add_norm_delta16_exact(n)) {
            expect_near_all(got, want, rounding(p()), 1e-6, what + ": outputs");
            continue;
          }
          EXPECT_EQ(differ, 0u) << what << (k == 0 ? ": outputs" : ": residuals") << " differ at "
                                << differ << " elements, first " << first << ": " << got[first]
                                << " against " << want[first] << " (delta "
                                << widened[first % (static_cast<std::size_t>(rows) * n)] << ")";
        }
      }
    }
  }
}

TEST_P(CudaKernels, MlpActivationMatchesCpu) {
  std::mt19937 rng(3);
  const int tokens = 3, width = 301;
  for (auto [kind, cpu_kind] :
       {std::pair{ActivationKind::kSilu, cpu::ActivationKind::kSilu},
        std::pair{ActivationKind::kGelu, cpu::ActivationKind::kGelu},
        std::pair{ActivationKind::kGeluTanh, cpu::ActivationKind::kGeluTanh},
        std::pair{ActivationKind::kRelu, cpu::ActivationKind::kRelu}}) {
    for (bool gated : {true, false}) {
      const int cols = gated ? 2 * width : width;
      const auto in = random_vector(tokens * cols, rng, 2.0f), bias = random_vector(cols, rng);
      Dev<float> din(in), dbias(bias);
      Dev<Half> out(tokens * width);
      mlp_activation(kind, gated, din.get(), dbias.get(), tokens, width, out.get(), p(), nullptr);
      std::vector<float> gate(tokens * width), up(tokens * width);
      for (int t = 0; t < tokens; ++t) {
        for (int i = 0; i < width; ++i) {
          gate[t * width + i] = in[t * cols + i] + bias[i];
          if (gated) up[t * width + i] = in[t * cols + width + i] + bias[width + i];
        }
      }
      if (gated) {
        cpu::gated_activation(cpu_kind, gate.data(), up.data(), gate.size());
      } else {
        cpu::activate_inplace(cpu_kind, gate.data(), gate.size());
      }
      expect_near_all(
          from_half(out, gate.size(), p()), gate, rounding(p()), 1e-5,
          "activation " + std::to_string(static_cast<int>(kind)) + (gated ? " gated" : ""));
    }
  }
}

TEST_P(CudaKernels, LinearMatchesCpuMatmul) {
  std::mt19937 rng(4);
  // With gemv on, 1-9 tokens cover every variant of the small-step kernel (gemv.hpp) and
  // cuBLAS past it; in = 203 is not a multiple of 8, so cuBLAS takes it at any size; 1000
  // has a remainder after the unrolled chunks.
  for (const bool gemv : {false, true}) {
    for (const int in : {200, 203, 1000}) {
      for (const int tokens : {1, 2, 3, 4, 5, 7, 8, 9, 33}) {
        const int out = 131;
        std::vector<float> x_r, w_r;
        auto x = to_half(random_vector(tokens * in, rng), p(), &x_r);
        auto w = to_half(random_vector(out * in, rng, 0.1f), p(), &w_r);
        // Write into the columns [5, 5 + out) of a wider output, as fused products may; NaN
        // where nothing was written.
        const int ldy = out + 9;
        Dev<float> y(std::vector<float>(static_cast<std::size_t>(tokens) * ldy, std::nanf("")));
        Blas blas;
        ASSERT_TRUE(blas.error().empty()) << blas.error();
        blas.set_gemv_max_tokens(gemv ? kGemvMaxTokens : 0);
        ASSERT_TRUE(
            blas.linear(x->get(), tokens, w->get(), out, in, y.get() + 5, ldy, p(), nullptr));
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        std::vector<float> want(static_cast<std::size_t>(tokens) * out);
        const cpu::WeightMatrix wm{DType::kF32, w_r.data(), static_cast<std::size_t>(out),
                                   static_cast<std::size_t>(in)};
        cpu::matmul(x_r.data(), tokens, wm, nullptr, want.data(), nullptr);
        const auto all = y.download();
        std::vector<float> got;
        for (int t = 0; t < tokens; ++t)
          got.insert(got.end(), all.begin() + t * ldy + 5, all.begin() + t * ldy + 5 + out);
        expect_near_all(got, want, 1e-4, 1e-4,
                        std::string(gemv ? "gemv" : "cuBLAS") + " linear in " + std::to_string(in) +
                            " tokens " + std::to_string(tokens));
      }
    }
  }
}

// A small paged setup: `seqs` sequences with their page tables over shuffled pages.
struct PagedSetup {
  int layers = 2, kv_heads = 2, heads = 6, dim = 40, page_size = 3, pages = 64;
  int prefill_queries = 37;  // query tokens of a prefill check (the last of the context)
  std::size_t page_elems() const {
    return 2 * static_cast<std::size_t>(layers) * kv_heads * page_size * dim;
  }
};

// L2 prefetches are hints: over whole buffers, odd lengths (rounded down to 16 bytes), an
// offset start, an empty and a null range, they launch without error, reach no byte past the
// range (a fault would show in the synchronisation) and change nothing.
TEST_P(CudaKernels, L2PrefetchLaunchesAndChangesNothing) {
  if (p() != Precision::kBF16) GTEST_SKIP() << "precision-independent; runs once";
  std::vector<std::uint32_t> host((3u << 20) / 4 + 12);
  for (std::size_t i = 0; i < host.size(); ++i)
    host[i] = static_cast<std::uint32_t>(i * 2654435761u);
  Dev<std::uint32_t> buf(host);
  const std::size_t bytes = host.size() * 4;
  const auto* base = reinterpret_cast<const char*>(buf.get());
  l2_prefetch(base, bytes, nullptr);
  l2_prefetch(base + 16, 1000003, nullptr);
  l2_prefetch(base + 48, bytes - 48, nullptr);
  l2_prefetch(base, 15, nullptr);
  l2_prefetch(base, 0, nullptr);
  l2_prefetch(nullptr, bytes, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  EXPECT_TRUE(buf.download() == host);
}

TEST_P(CudaKernels, RopeStoreKvMatchesCpuRopeAndWritesPages) {
  std::mt19937 rng(5);
  const PagedSetup ps;
  const int layer = 1, T = 4, NH = ps.heads, NKV = ps.kv_heads, D = ps.dim;
  const int width = (NH + 2 * NKV) * D;
  const std::vector<std::int32_t> positions{0, 7, 8, 2}, token_seq{0, 1, 1, 0};
  const std::vector<std::int32_t> page_ids{5, 1, 9, 4, 2, 7}, table_begin{0, 2};  // seq0: 5,1
  for (bool interleaved : {false, true}) {
    for (int rotary : {D, 24}) {
      const auto qkv0 = random_vector(T * width, rng), bias = random_vector(width, rng);
      std::vector<float> inv_freq(2 * rotary / 2), factor{1.0f, 0.75f};
      for (int s = 0; s < 2; ++s)
        for (int j = 0; j < rotary / 2; ++j)
          inv_freq[s * rotary / 2 + j] = std::pow(10000.0f + 500.0f * s, -2.0f * j / rotary);
      Dev<float> qkv(qkv0), dbias(bias), dfreq(inv_freq), dfactor(factor);
      Dev<std::int32_t> dpos(positions), dseq(token_seq), dpages(page_ids), dbegin(table_begin);
      Dev<Half> pool(ps.page_elems() * ps.pages);
      RopeArgs a;
      a.qkv = qkv.get();
      a.qkv_bias = dbias.get();
      a.num_heads = NH;
      a.rotary_dim = rotary;
      a.interleaved = interleaved;
      a.inv_freq = dfreq.get();
      a.attention_factor = dfactor.get();
      FlatBatchView fb{dpos.get(), dseq.get(), dbegin.get(), dpages.get(), T};
      PagedKvView kv{pool.get(),
                     p(),
                     ps.page_elems(),
                     static_cast<std::size_t>(layer) * ps.page_elems() / ps.layers,
                     ps.page_size,
                     NKV,
                     D};
      rope_store_kv(a, fb, kv, nullptr);
      const auto got_qkv = qkv.download();
      const auto got_pool = from_half(pool, ps.page_elems() * ps.pages, p());
      for (int t = 0; t < T; ++t) {
        std::vector<float> row(qkv0.begin() + t * width, qkv0.begin() + (t + 1) * width);
        for (int i = 0; i < width; ++i)
          row[i] += bias[i];
        std::vector<float> c(rotary / 2), s(rotary / 2);
        for (int j = 0; j < rotary / 2; ++j) {
          const float angle =
              static_cast<float>(positions[t]) * inv_freq[token_seq[t] * rotary / 2 + j];
          c[j] = std::cos(angle) * factor[token_seq[t]];
          s[j] = std::sin(angle) * factor[token_seq[t]];
        }
        const auto pairing =
            interleaved ? cpu::RopePairing::kInterleaved : cpu::RopePairing::kHalfSplit;
        cpu::apply_rope(row.data(), NH + NKV, D, rotary, c.data(), s.data(), pairing);
        const std::string what = "token " + std::to_string(t) +
                                 (interleaved ? " interleaved" : " half-split") + " rotary " +
                                 std::to_string(rotary);
        expect_near_all(
            std::vector<float>(got_qkv.begin() + t * width, got_qkv.begin() + t * width + NH * D),
            std::vector<float>(row.begin(), row.begin() + NH * D), 1e-5, 1e-5, what + " q");
        const int page = page_ids[table_begin[token_seq[t]] + positions[t] / ps.page_size];
        const int slot = positions[t] % ps.page_size;
        std::vector<float> k_got, v_got, k_want, v_want;
        for (int h = 0; h < NKV; ++h) {
          for (int d = 0; d < D; ++d) {
            const std::size_t at =
                page * ps.page_elems() + kv.layer_offset + (h * ps.page_size + slot) * D + d;
            k_got.push_back(got_pool[at]);
            v_got.push_back(got_pool[at + static_cast<std::size_t>(NKV) * ps.page_size * D]);
            k_want.push_back(row[(NH + h) * D + d]);
            v_want.push_back(row[(NH + NKV + h) * D + d]);
          }
        }
        expect_near_all(k_got, k_want, rounding(p()), 1e-5, what + " k page");
        expect_near_all(v_got, v_want, rounding(p()), 1e-5, what + " v page");
      }
    }
  }
}

// Decode (with and without splits) and prefill attention against cpu::paged_attention, with
// GQA, a sliding window, page_size 3 and shuffled pages.
void check_attention(Precision p, int context, int window, bool prefill,
                     const PagedSetup& ps = PagedSetup{}) {
  std::mt19937 rng(6 + context + window);
  const int NH = ps.heads, NKV = ps.kv_heads, D = ps.dim, layer = 1;
  const int pages_needed = (context + ps.page_size - 1) / ps.page_size;
  const int pool_pages = pages_needed + 5;
  std::vector<std::int32_t> table(pool_pages);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  table.resize(pages_needed);
  // Fill the whole pool with random (rounded) values.
  std::vector<float> pool_r;
  auto pool = to_half(random_vector(ps.page_elems() * pool_pages, rng), p, &pool_r);
  // Queries: the last `count` positions of the sequence (prefill) or the last one (decode),
  // plus for decode a second sequence sharing the pages with a shorter context.
  const int count = prefill ? std::min(context, ps.prefill_queries) : 1;
  std::vector<std::int32_t> positions, token_seq;
  for (int i = 0; i < count; ++i) {
    positions.push_back(context - count + i);
    token_seq.push_back(0);
  }
  if (!prefill) {
    positions.push_back(context / 3);
    token_seq.push_back(1);
  }
  const int T = static_cast<int>(positions.size());
  const auto q = random_vector(static_cast<std::size_t>(T) * NH * D, rng);
  std::vector<std::int32_t> page_ids = table;
  page_ids.insert(page_ids.end(), table.begin(), table.end());
  const std::vector<std::int32_t> table_begin{0, pages_needed};
  Dev<float> dq(q);
  Dev<std::int32_t> dpos(positions), dseq(token_seq), dpages(page_ids), dbegin(table_begin);
  Dev<Half> out(static_cast<std::size_t>(T) * NH * D);
  FlatBatchView fb{dpos.get(), dseq.get(), dbegin.get(), dpages.get(), T};
  PagedKvView kv{pool->get(),
                 p,
                 ps.page_elems(),
                 static_cast<std::size_t>(layer) * ps.page_elems() / ps.layers,
                 ps.page_size,
                 NKV,
                 D};
  AttentionArgs a;
  a.q = dq.get();
  a.q_stride = static_cast<std::size_t>(NH) * D;
  a.num_heads = NH;
  a.scale = 0.2f;
  a.sliding_window = window;
  a.out = out.get();
  if (prefill) {
    std::vector<PrefillTile> tiles;
    const int per_tile = prefill_tile_queries(D);
    for (int i = 0; i < T; i += per_tile)
      tiles.push_back({i, std::min(per_tile, T - i)});
    std::vector<std::int32_t> flat;
    for (auto t : tiles) {
      flat.push_back(t.first_token);
      flat.push_back(t.count);
    }
    Dev<std::int32_t> dtiles(flat);
    prefill_attention(a, fb, kv, reinterpret_cast<const PrefillTile*>(dtiles.get()),
                      static_cast<int>(tiles.size()), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  } else {
    std::vector<std::int32_t> queries(T);
    std::iota(queries.begin(), queries.end(), 0);
    Dev<std::int32_t> dqueries(queries);
    Dev<float> work(std::max<std::size_t>(1, decode_workspace_floats(T, NH, D, context)));
    decode_attention(a, fb, kv, dqueries.get(), T, context, work.get(), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  const auto got = from_half(out, static_cast<std::size_t>(T) * NH * D, p);
  std::vector<float> want(got.size());
  // The tensor-core prefill multiplies q * scale rounded to 16 bits (the CUDA-core kernels keep
  // it fp32); the reference does the same so what remains is the rounding of the softmax
  // weights to 16 bits before P V.
  const bool tensor_cores = prefill && prefill_tile_queries(D) != kPrefillTileQueries;
  std::vector<float> q_ref = q;
  float ref_scale = 0.2f;
  if (tensor_cores) {
    for (auto& x : q_ref) {
      x *= 0.2f;
      x = p == Precision::kBF16 ? cpu::bf16_to_f32(cpu::f32_to_bf16(x))
                                : cpu::f16_to_f32(cpu::f32_to_f16(x));
    }
    ref_scale = 1.0f;
  }
  for (int t = 0; t < T; ++t) {
    std::vector<const void*> blocks;
    for (int page : table)
      blocks.push_back(pool_r.data() + page * ps.page_elems() + kv.layer_offset);
    const cpu::PagedKv view{blocks.data(), static_cast<std::size_t>(ps.page_size),
                            static_cast<std::size_t>(NKV), static_cast<std::size_t>(D)};
    const int pos = positions[t];
    const int first = window > 0 && pos + 1 > window ? pos + 1 - window : 0;
    std::vector<float> scratch(pos + 1);
    cpu::paged_attention(q_ref.data() + t * NH * D, NH, view, first, pos, ref_scale,
                         want.data() + t * NH * D, scratch.data());
  }
  double worst_abs = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    worst_abs = std::max(worst_abs, static_cast<double>(std::fabs(got[i] - want[i])));
  if (tensor_cores) {
    std::cout << "[ measured ] tensor-core prefill " << precision_name(p) << " head_dim " << D
              << " context " << context << " window " << window << ": max |gpu - cpu| " << worst_abs
              << "\n";
  }
  // Softmax weights rounded to 16 bits (tensor-core prefill, as FlashAttention does) move an
  // output of order one by up to a few rounding units where few keys dominate.
  const double abs_tol = tensor_cores ? 2e-3 + 2 * rounding(p) : 2e-3;
  expect_near_all(got, want, 2 * rounding(p), abs_tol,
                  std::string(prefill ? "prefill" : "decode") + " context " +
                      std::to_string(context) + " window " + std::to_string(window) + " head_dim " +
                      std::to_string(D) + " heads " + std::to_string(NH) + "/" +
                      std::to_string(NKV));
}

TEST_P(CudaKernels, DecodeAttentionMatchesCpuShortAndSplit) {
  for (int context : {1, 5, 130, 1300})
    for (int window : {0, 100})
      check_attention(p(), context, window, false);
}

// Head dims 64, 128 and 256 take the tensor-core decode kernel and head_dim 32 the register
// kernel (up to 8 heads per kv head); MQA with 16 heads per kv head takes the scalar one.
TEST_P(CudaKernels, DecodeAttentionMatchesCpuOnVectorizedShapes) {
  for (auto [heads, kv_heads, dim, page] :
       {std::array{6, 2, 64, 16}, std::array{8, 2, 128, 3}, std::array{4, 4, 256, 5},
        std::array{16, 1, 64, 16}, std::array{8, 1, 32, 7}}) {
    PagedSetup ps;
    ps.heads = heads;
    ps.kv_heads = kv_heads;
    ps.dim = dim;
    ps.page_size = page;
    for (int context : {1, 70, 700})
      for (int window : {0, 100})
        check_attention(p(), context, window, false, ps);
  }
}

// A decode step whose attention kernel applies the rotary embedding and stores the keys and
// values itself (AttentionArgs::rope_inv_freq) gives bitwise the outputs and KV pages of
// rope_store_kv followed by decode_attention: three tokens of three sequences with their own
// pages (one context split, one not, one in the first tile), per-sequence frequencies and
// attention factors, with and without a window.
TEST_P(CudaKernels, DecodeAttentionWithRopeIsBitwiseRopeStoreKvThenAttention) {
  for (auto [heads, kv_heads, dim, page] : {std::array{6, 2, 64, 16}, std::array{8, 2, 128, 3},
                                            std::array{4, 4, 256, 5}, std::array{32, 8, 128, 16}}) {
    ASSERT_TRUE(decode_attention_applies_rope(heads, kv_heads, dim)) << heads << "/" << dim;
    for (int context : {1, 70, 700}) {
      for (int window : {0, 100}) {
        std::mt19937 rng(11 + context + window + dim);
        PagedSetup ps;
        ps.heads = heads;
        ps.kv_heads = kv_heads;
        ps.dim = dim;
        ps.page_size = page;
        const int NH = heads, NKV = kv_heads, D = dim, layer = 1;
        const int width = (NH + 2 * NKV) * D;
        const std::vector<std::int32_t> positions{context - 1, context / 3,
                                                  std::min(context, 40) - 1};
        const int S = static_cast<int>(positions.size());
        // Disjoint page tables: sequence s owns pages [s * per, (s + 1) * per), shuffled.
        const int per = (context + page - 1) / page;
        ps.pages = S * per + 2;
        std::vector<std::int32_t> ids(S * per), page_ids, table_begin, token_seq;
        std::iota(ids.begin(), ids.end(), 0);
        std::shuffle(ids.begin(), ids.end(), rng);
        for (int sq = 0; sq < S; ++sq) {
          table_begin.push_back(static_cast<std::int32_t>(page_ids.size()));
          page_ids.insert(page_ids.end(), ids.begin() + sq * per, ids.begin() + (sq + 1) * per);
          token_seq.push_back(sq);
        }
        std::vector<float> inv_freq(static_cast<std::size_t>(S) * D / 2), factor(S);
        for (int sq = 0; sq < S; ++sq) {
          factor[sq] = 1.0f - 0.125f * sq;
          for (int j = 0; j < D / 2; ++j)
            inv_freq[sq * D / 2 + j] = std::pow(500000.0f + 1000.0f * sq, -2.0f * j / D);
        }
        const auto qkv0 = random_vector(static_cast<std::size_t>(S) * width, rng);
        const auto pool0 = random_vector(ps.page_elems() * ps.pages, rng);
        Dev<std::int32_t> dpos(positions), dseq(token_seq), dpages(page_ids), dbegin(table_begin);
        Dev<float> dfreq(inv_freq), dfactor(factor);
        std::vector<std::int32_t> queries(S);
        std::iota(queries.begin(), queries.end(), 0);
        Dev<std::int32_t> dqueries(queries);
        FlatBatchView fb{dpos.get(), dseq.get(), dbegin.get(), dpages.get(), S};
        std::vector<Half> outs[2], pools[2];
        for (int fused = 0; fused < 2; ++fused) {
          auto pool = to_half(pool0, p(), nullptr);
          Dev<float> qkv(qkv0);
          Dev<Half> out(static_cast<std::size_t>(S) * NH * D);
          Dev<float> work(std::max<std::size_t>(1, decode_workspace_floats(S, NH, D, context)));
          PagedKvView kv{pool->get(),
                         p(),
                         ps.page_elems(),
                         static_cast<std::size_t>(layer) * ps.page_elems() / ps.layers,
                         ps.page_size,
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
          decode_attention(a, fb, kv, dqueries.get(), S, context, work.get(), nullptr);
          ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
          outs[fused] = out.download();
          pools[fused] = pool->download();
        }
        const std::string what = "heads " + std::to_string(NH) + "/" + std::to_string(NKV) +
                                 " head_dim " + std::to_string(D) + " context " +
                                 std::to_string(context) + " window " + std::to_string(window);
        EXPECT_TRUE(outs[0] == outs[1]) << what << ": attention outputs differ";
        EXPECT_TRUE(pools[0] == pools[1]) << what << ": KV pages differ";
      }
    }
  }
}

// Head dims that are multiples of 16 take the tensor-core prefill kernel (64-query tiles,
// 64-key tiles): several tiles each way, GQA, MQA, a window, awkward page sizes.
TEST_P(CudaKernels, PrefillAttentionMatchesCpuOnTensorCoreShapes) {
  for (auto [heads, kv_heads, dim, page] : {std::array{6, 2, 64, 16}, std::array{8, 2, 128, 3},
                                            std::array{4, 4, 256, 5}, std::array{4, 1, 80, 7}}) {
    PagedSetup ps;
    ps.heads = heads;
    ps.kv_heads = kv_heads;
    ps.dim = dim;
    ps.page_size = page;
    ps.prefill_queries = 150;
    for (int context : {1, 64, 65, 200})
      for (int window : {0, 50})
        check_attention(p(), context, window, true, ps);
  }
}

TEST_P(CudaKernels, PrefillAttentionMatchesCpu) {
  for (int context : {1, 20, 37, 90})
    for (int window : {0, 7})
      check_attention(p(), context, window, true);
}

INSTANTIATE_TEST_SUITE_P(Precisions, CudaKernels,
                         ::testing::Values(Precision::kBF16, Precision::kF16),
                         [](const ::testing::TestParamInfo<Precision>& param) {
                           return std::string(precision_name(param.param));
                         });

}  // namespace
}  // namespace weft::cuda
