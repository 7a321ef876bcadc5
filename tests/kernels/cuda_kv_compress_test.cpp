// KV-Compress's kernels on the GPU (kernels/cuda/kv_compress.hpp) against the CPU's on the same
// pages and queries: window scores against cpu::window_attention_scores (fp32, to summation
// order), the kept slots bitwise those kv::select_kept_slots picks from the same scores (ties
// included), and the compacted pool bitwise what cpu::compact_kv_head makes of it; bf16, int8
// and fp8 pages, several sequences per step, windows longer than a sequence's chunk. Skips
// without a GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/kv_compress.hpp"
#include "kernels/cuda/device_info.hpp"
#include "kernels/cuda/kv_compress.hpp"
#include "kernels/cuda/rope.hpp"
#include "runtime/kv/kv_compress.hpp"
#include "tests/kernels/cuda_test_buffer.hpp"

namespace weft::cuda {
namespace {

using test_support::DeviceArray;

bool have_gpu() {
  return !visible_devices().devices.empty();
}

// The pool layout of runtime/model/kv_cache.hpp: per layer K rows then V rows, and for the
// one-byte types their fp32 scales from a 16-byte aligned offset.
struct Layout {
  KvDtype dtype = KvDtype::kBF16;
  int layers = 2, kv_heads = 2, dim = 64, page_size = 16;
  std::size_t eb() const { return kv_element_bytes(dtype); }
  std::size_t rows() const { return 2 * static_cast<std::size_t>(kv_heads) * page_size; }
  std::size_t scales_offset() const {
    return kv_dtype_scaled(dtype) ? (rows() * dim * eb() + 15) / 16 * 16 : 0;
  }
  std::size_t layer_bytes() const {
    return kv_dtype_scaled(dtype) ? (scales_offset() + rows() * 4 + 15) / 16 * 16
                                  : rows() * dim * eb();
  }
  std::size_t page_bytes() const { return layer_bytes() * layers; }
};

std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float spread) {
  std::normal_distribution<float> dist(0.0f, spread);
  std::vector<float> v(n);
  for (auto& x : v)
    x = dist(rng);
  return v;
}

struct Sequence {
  int slots = 0;      // tokens cached after the step
  int chunk = 0;      // tokens of the step (the window queries come from its last ones)
  int window = 0;     // compress_window
  double rate = 0.0;  // 0: not compressing
  std::vector<std::int32_t> pages;
};

struct Case {
  Layout layout;
  int heads = 4;
  std::vector<Sequence> seqs;
  std::string name() const {
    return std::string(kv_dtype_name(layout.dtype)) + " dim " + std::to_string(layout.dim) +
           " heads " + std::to_string(heads) + "/" + std::to_string(layout.kv_heads);
  }
};

void check_case(const Case& c, unsigned seed) {
  const Layout& ly = c.layout;
  const int NH = c.heads, NKV = ly.kv_heads, D = ly.dim, layer = 1;
  const int width = (NH + 2 * NKV) * D;
  std::mt19937 rng(seed);
  int pool_pages = 0;
  for (const auto& s : c.seqs)
    pool_pages += static_cast<int>(s.pages.size());
  pool_pages += 2;  // pages no sequence holds stay as they are
  // Fill every sequence's cache of this layer through rope_store_kv (rotary_dim 0: rows as
  // given, quantized as the CPU quantizes them).
  std::vector<std::int32_t> positions, token_seq, table_begin, page_ids;
  for (std::size_t s = 0; s < c.seqs.size(); ++s) {
    table_begin.push_back(static_cast<std::int32_t>(page_ids.size()));
    page_ids.insert(page_ids.end(), c.seqs[s].pages.begin(), c.seqs[s].pages.end());
    for (int p = 0; p < c.seqs[s].slots; ++p) {
      positions.push_back(p);
      token_seq.push_back(static_cast<std::int32_t>(s));
    }
  }
  const int fill_tokens = static_cast<int>(positions.size());
  std::vector<std::uint8_t> pool_init(ly.page_bytes() * pool_pages);
  for (auto& b : pool_init)
    b = static_cast<std::uint8_t>(rng() & 0x3f);  // finite in every type
  DeviceArray<std::uint8_t> pool(pool_init);
  DeviceArray<std::int32_t> dpos(positions), dseq(token_seq), dbegin(table_begin), dpages(page_ids);
  const FlatBatchView fb{dpos.get(), dseq.get(), dbegin.get(), dpages.get(), fill_tokens};
  const PagedKvView kv{pool.get(),
                       Precision::kBF16,
                       ly.page_bytes() / ly.eb(),
                       layer * ly.layer_bytes() / ly.eb(),
                       ly.page_size,
                       NKV,
                       D,
                       ly.dtype,
                       ly.scales_offset()};
  {
    DeviceArray<float> qkv(random_vector(static_cast<std::size_t>(fill_tokens) * width, rng, 1.0f));
    RopeArgs ra;
    ra.qkv = qkv.get();
    ra.num_heads = NH;
    ra.rotary_dim = 0;
    rope_store_kv(ra, fb, kv, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  // The step's queries: each sequence's chunk, rows of the qkv product's width.
  int step_tokens = 0;
  std::vector<KvCompressJob> jobs;
  std::size_t floats = 0;
  int max_queries = 0, max_slots = 0;
  for (std::size_t s = 0; s < c.seqs.size(); ++s) {
    const Sequence& seq = c.seqs[s];
    if (seq.rate > 0.0) {
      KvCompressJob j;
      j.seq = static_cast<std::int32_t>(s);
      j.queries = std::min(seq.window, seq.chunk);
      j.first_query = step_tokens + seq.chunk - j.queries;
      j.slots = seq.slots;
      j.evict = kv::evicted_slots(seq.slots, {seq.rate, seq.window}, ly.page_size);
      j.protect = seq.window;
      j.offset = static_cast<std::int32_t>(floats);
      floats += static_cast<std::size_t>(NKV) * seq.slots;
      max_queries = std::max(max_queries, j.queries);
      max_slots = std::max(max_slots, j.slots);
      ASSERT_GT(j.evict, 0) << c.name() << ": sequence " << s << " evicts nothing";
      jobs.push_back(j);
    }
    step_tokens += seq.chunk;
  }
  const auto q_host = random_vector(static_cast<std::size_t>(step_tokens) * width, rng, 1.5f);
  DeviceArray<float> q(q_host);
  DeviceArray<KvCompressJob> djobs(jobs);
  const int num_jobs = static_cast<int>(jobs.size());
  DeviceArray<float> stats(kv_compress_row_stat_floats(num_jobs, max_queries, NH));
  DeviceArray<float> scores(floats);
  DeviceArray<std::int32_t> kept(floats);
  KvCompressArgs args;
  args.q = q.get();
  args.q_stride = static_cast<std::size_t>(width);
  args.num_heads = NH;
  args.scale = 1.0f / std::sqrt(static_cast<float>(D));
  args.jobs = djobs.get();
  args.num_jobs = num_jobs;
  args.max_queries = max_queries;
  args.max_slots = max_slots;
  args.row_stats = stats.get();
  args.scores = scores.get();
  args.kept = kept.get();
  kv_compress_scores(args, fb, kv, nullptr);
  kv_compress_select(args, kv, nullptr);
  const auto got_scores = scores.download();
  const auto got_kept = kept.download();
  auto host_pool = pool.download();  // filled, not compacted yet
  kv_compress_compact(args, fb, kv, nullptr);
  const auto got_pool = pool.download();
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);

  // The CPU on the same pages: scores, choices, and the compaction of host_pool.
  for (const KvCompressJob& j : jobs) {
    const Sequence& seq = c.seqs[static_cast<std::size_t>(j.seq)];
    const std::string what = c.name() + " sequence " + std::to_string(j.seq);
    std::vector<void*> blocks;
    for (auto p : seq.pages)
      blocks.push_back(host_pool.data() + static_cast<std::size_t>(p) * ly.page_bytes() +
                       layer * ly.layer_bytes());
    const cpu::MutablePagedKv view{blocks.data(),
                                   static_cast<std::size_t>(ly.page_size),
                                   static_cast<std::size_t>(NKV),
                                   static_cast<std::size_t>(D),
                                   ly.dtype,
                                   ly.scales_offset()};
    std::vector<float> window_q;
    for (int w = 0; w < j.queries; ++w) {
      const float* row = q_host.data() + static_cast<std::size_t>(j.first_query + w) * width;
      window_q.insert(window_q.end(), row, row + static_cast<std::size_t>(NH) * D);
    }
    std::vector<float> want(static_cast<std::size_t>(NKV) * j.slots), scratch(j.slots);
    cpu::window_attention_scores(window_q.data(), j.queries, NH, view.view(), j.slots, args.scale,
                                 want.data(), scratch.data());
    const float* got = got_scores.data() + j.offset;
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double err = std::fabs(got[i] - want[i]) / std::max(1e-3, std::fabs(double{want[i]}));
      worst = std::max(worst, err);
      ASSERT_LE(err, 1e-4) << what << " score " << i << ": " << got[i] << " vs " << want[i];
    }
    std::vector<int> from_gpu_scores, from_cpu_scores;
    const int count = j.slots - j.evict;
    for (int h = 0; h < NKV; ++h) {
      kv::select_kept_slots(std::span<const float>(got + static_cast<std::size_t>(h) * j.slots,
                                                   static_cast<std::size_t>(j.slots)),
                            j.evict, j.protect, from_gpu_scores);
      kv::select_kept_slots(
          std::span<const float>(want.data() + static_cast<std::size_t>(h) * j.slots,
                                 static_cast<std::size_t>(j.slots)),
          j.evict, j.protect, from_cpu_scores);
      const std::int32_t* chosen =
          got_kept.data() + j.offset + static_cast<std::size_t>(h) * j.slots;
      ASSERT_EQ(static_cast<int>(from_gpu_scores.size()), count) << what;
      EXPECT_TRUE(std::equal(from_gpu_scores.begin(), from_gpu_scores.end(), chosen))
          << what << " head " << h << ": the GPU's choice is not select_kept_slots'";
      EXPECT_EQ(from_cpu_scores, from_gpu_scores)
          << what << " head " << h << ": the CPU's scores choose other slots";
      cpu::compact_kv_head(view, static_cast<std::size_t>(h), from_gpu_scores.data(),
                           from_gpu_scores.size());
    }
    std::cout << "[ measured ] " << what << ": " << j.slots << " slots, " << j.queries
              << " queries, evicts " << j.evict << "; worst relative score error " << worst << "\n";
  }
  EXPECT_EQ(std::memcmp(got_pool.data(), host_pool.data(), host_pool.size()), 0)
      << c.name() << ": the compacted pool differs from the CPU's compaction";
}

std::vector<std::int32_t> page_range(int first, int count, bool reversed) {
  std::vector<std::int32_t> p(static_cast<std::size_t>(count));
  std::iota(p.begin(), p.end(), first);
  if (reversed) std::reverse(p.begin(), p.end());
  return p;
}

TEST(CudaKvCompress, ScoresChoicesAndCompactionMatchTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  unsigned seed = 1;
  for (KvDtype dtype : {KvDtype::kBF16, KvDtype::kInt8, KvDtype::kFp8E4M3}) {
    for (int dim : {64, 128}) {
      Case c;
      c.layout.dtype = dtype;
      c.layout.dim = dim;
      c.layout.kv_heads = 2;
      c.heads = 8;  // groups of 4
      // A long prompt in one chunk (scores over several scan chunks), a chunk shorter than its
      // window (3 queries, 5 protected slots), a sequence that does not compress, and a rate
      // whose eviction is capped by the window.
      c.seqs.push_back({700, 700, 16, 0.5, page_range(0, 44, true)});
      c.seqs.push_back({37, 3, 5, 0.75, page_range(44, 3, false)});
      c.seqs.push_back({20, 4, 4, 0.0, page_range(47, 2, false)});
      c.seqs.push_back({60, 60, 30, 0.9, page_range(49, 4, true)});
      check_case(c, seed++);
    }
  }
  // MQA (one kv head) and head_dim 256.
  Case c;
  c.layout.dim = 256;
  c.layout.kv_heads = 1;
  c.heads = 3;
  c.seqs.push_back({129, 64, 8, 0.5, page_range(0, 9, true)});
  check_case(c, seed++);
}

// Scores with many exact ties (a few distinct values) straight into the select kernel: the
// kept slots are select_kept_slots' (an equal score keeps the earlier slot), over 5000 slots
// (several passes of the block's scans) and for a head that keeps nothing but its window.
TEST(CudaKvCompress, SelectionBreaksTiesAsTheCpu) {
  if (!have_gpu()) GTEST_SKIP() << "no CUDA device";
  std::mt19937 rng(7);
  const int NKV = 3;
  std::vector<KvCompressJob> jobs;
  std::vector<float> scores;
  const int shapes[][3] = {{5000, 16, 2400}, {300, 40, 260}, {64, 1, 32}, {17, 16, 1}};
  for (const auto& shape : shapes) {
    KvCompressJob j;
    j.slots = shape[0];
    j.protect = shape[1];
    j.evict = shape[2];
    j.offset = static_cast<std::int32_t>(scores.size());
    jobs.push_back(j);
    for (int i = 0; i < NKV * j.slots; ++i)
      scores.push_back(static_cast<float>(rng() % 4) * 0.25f + (i % 7 == 0 ? 1e-7f : 0.0f));
  }
  DeviceArray<float> dscores(scores);
  DeviceArray<std::int32_t> kept(scores.size());
  DeviceArray<KvCompressJob> djobs(jobs);
  KvCompressArgs args;
  args.jobs = djobs.get();
  args.num_jobs = static_cast<int>(jobs.size());
  args.max_slots = 5000;
  args.max_queries = 1;
  args.scores = dscores.get();
  args.kept = kept.get();
  PagedKvView kv;
  kv.num_kv_heads = NKV;
  kv_compress_select(args, kv, nullptr);
  const auto got = kept.download();
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  std::vector<int> want;
  for (const auto& j : jobs) {
    for (int h = 0; h < NKV; ++h) {
      const std::size_t at =
          static_cast<std::size_t>(j.offset) + static_cast<std::size_t>(h) * j.slots;
      kv::select_kept_slots(
          std::span<const float>(scores.data() + at, static_cast<std::size_t>(j.slots)), j.evict,
          j.protect, want);
      EXPECT_TRUE(
          std::equal(want.begin(), want.end(), got.begin() + static_cast<std::ptrdiff_t>(at)))
          << j.slots << " slots, head " << h;
    }
  }
}

}  // namespace
}  // namespace weft::cuda
