// The scheduler with KV-Compress (runtime/kv/kv_compress.hpp), against a simulated KV store:
// each slot holds a hash of the tokens up to the position stored there, the "model" checks
// every slot it reads against the positions it believes the sequence kept, writes its tokens
// at slot = position - slot_offset, and on a compression keeps a pseudo-random choice of the
// evictable slots (never the window) and compacts them as the CPU kernel does. A page
// written while shared, a compressed page that reaches the prefix cache, a slot offset that
// is off by one, or a page freed while in use shows up as a wrong hash; outputs must equal a
// run without compression (the fake model's next token depends on the prefix only); and
// every page returns to the pool at the end.

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "runtime/scheduler/scheduler.hpp"

namespace weft::sched {
namespace {

std::uint64_t prefix_hash(const std::vector<std::int32_t>& tokens, int last) {
  std::uint64_t h = 1469598103934665603ull;
  for (int i = 0; i <= last; ++i)
    h = (h ^ static_cast<std::uint64_t>(tokens[static_cast<std::size_t>(i)] + 1)) *
        1099511628211ull;
  return h;
}

std::int32_t next_token(std::uint64_t hash) {
  return static_cast<std::int32_t>(hash % 50);
}

std::vector<std::int32_t> reference_output(std::vector<std::int32_t> tokens, int max_new) {
  const std::size_t prompt = tokens.size();
  for (int i = 0; i < max_new; ++i)
    tokens.push_back(next_token(prefix_hash(tokens, static_cast<int>(tokens.size()) - 1)));
  return {tokens.begin() + static_cast<std::ptrdiff_t>(prompt), tokens.end()};
}

class FakeModel {
 public:
  FakeModel(const Scheduler& scheduler, unsigned seed)
      : scheduler_(scheduler),
        page_size_(scheduler.pool().page_size()),
        kv_(static_cast<std::size_t>(scheduler.pool().num_pages() * page_size_), 0),
        rng_(seed) {}

  std::vector<std::int32_t> run(const StepPlan& plan) {
    const kv::PagePool& pool = scheduler_.pool();
    std::vector<std::int32_t> sampled;
    for (const ScheduledSlice& slice : plan.slices) {
      const Sequence* seq = scheduler_.find(slice.id);
      EXPECT_NE(seq, nullptr);
      if (seq == nullptr) continue;
      std::vector<int>& kept = kept_[slice.id];  // slot -> position
      if (slice.slot_offset == 0) {
        // Uncompressed: slots are positions (a fresh start, a recompute or a cache hit).
        kept.resize(static_cast<std::size_t>(slice.first_position));
        for (int q = 0; q < slice.first_position; ++q)
          kept[static_cast<std::size_t>(q)] = q;
      }
      EXPECT_EQ(static_cast<int>(kept.size()), slice.first_position - slice.slot_offset)
          << "sequence " << slice.id << ": slots held before the slice";
      kept.resize(static_cast<std::size_t>(std::max(0, slice.first_position - slice.slot_offset)));
      const int last_slot = slice.first_position + slice.token_count - 1 - slice.slot_offset;
      EXPECT_EQ(static_cast<int>(slice.page_table.size()), (last_slot + page_size_) / page_size_)
          << "sequence " << slice.id << ": its page table is not what its slots need";
      for (std::size_t j = 0; j < kept.size(); ++j) {
        EXPECT_EQ(at(slice.page_table, static_cast<int>(j)), prefix_hash(seq->tokens, kept[j]))
            << "sequence " << slice.id << " slot " << j << " (position " << kept[j] << ")";
      }
      for (int i = 0; i < slice.token_count; ++i) {
        const int p = slice.first_position + i;
        const int slot = p - slice.slot_offset;
        const std::int32_t page = slice.page_table[static_cast<std::size_t>(slot / page_size_)];
        EXPECT_FALSE(pool.cached(page)) << "a cached page is written";
        EXPECT_EQ(pool.ref_count(page), 1) << "a shared page is written";
        at(slice.page_table, slot) = prefix_hash(seq->tokens, p);
        kept.push_back(p);
      }
      if (slice.samples) sampled.push_back(next_token(prefix_hash(seq->tokens, kept.back())));
      if (slice.compress_evict > 0) compress(slice, kept);
    }
    return sampled;
  }

  std::uint64_t compressions = 0;

 private:
  // Keeps a random choice of the evictable slots and compacts them, as the kernel does.
  void compress(const ScheduledSlice& slice, std::vector<int>& kept) {
    ++compressions;
    const kv::PagePool& pool = scheduler_.pool();
    for (auto page : slice.page_table) {
      EXPECT_EQ(pool.ref_count(page), 1) << "a shared page is compacted";
      EXPECT_FALSE(pool.cached(page)) << "a cached page is compacted";
    }
    const int slots = static_cast<int>(kept.size());
    const int evictable = slots - slice.compress_window;
    ASSERT_GE(evictable, slice.compress_evict);
    EXPECT_EQ(slice.compress_evict % page_size_, 0);
    std::vector<float> scores(static_cast<std::size_t>(slots));
    for (auto& s : scores)
      s = static_cast<float>(rng_() % 1000);
    std::vector<int> keep_slots;
    kv::select_kept_slots(scores, slice.compress_evict, slice.compress_window, keep_slots);
    EXPECT_EQ(static_cast<int>(keep_slots.size()), slots - slice.compress_evict);
    std::vector<int> positions;
    for (std::size_t i = 0; i < keep_slots.size(); ++i) {
      at(slice.page_table, static_cast<int>(i)) = at(slice.page_table, keep_slots[i]);
      positions.push_back(kept[static_cast<std::size_t>(keep_slots[i])]);
    }
    kept = positions;
  }

  std::uint64_t& at(const std::vector<std::int32_t>& table, int slot) {
    const auto page = static_cast<std::size_t>(table[static_cast<std::size_t>(slot / page_size_)]);
    return kv_[page * static_cast<std::size_t>(page_size_) +
               static_cast<std::size_t>(slot % page_size_)];
  }

  const Scheduler& scheduler_;
  int page_size_;
  std::vector<std::uint64_t> kv_;
  std::map<std::uint64_t, std::vector<int>> kept_;
  std::mt19937 rng_;
};

SchedulerConfig compress_config(int page_size, int num_pages, double rate, int window) {
  SchedulerConfig c;
  c.page_size = page_size;
  c.num_pages = num_pages;
  c.max_tokens_per_step = 64;
  c.max_running = 16;
  c.kv_compress = {rate, window};
  return c;
}

TEST(SchedulerKvCompress, ThePromptsLastChunkCompressesAndItsPagesGoBack) {
  // 100 prompt tokens in pages of 16 (7 pages); rate 0.5 evicts 48 slots (3 pages) per head.
  SchedulerConfig c = compress_config(16, 64, 0.5, 16);
  Scheduler scheduler(c);
  FakeModel model(scheduler, 1);
  std::vector<std::int32_t> prompt(100);
  for (int i = 0; i < 100; ++i)
    prompt[static_cast<std::size_t>(i)] = (i * 7) % 50;
  ASSERT_TRUE(scheduler.add(1, prompt, 10).ok());
  StepPlan first = scheduler.plan_step();  // 64 tokens: not the last chunk
  ASSERT_EQ(first.slices.size(), 1u);
  EXPECT_EQ(first.slices[0].compress_evict, 0);
  scheduler.complete_step(first, model.run(first));
  StepPlan last = scheduler.plan_step();  // the other 36
  ASSERT_EQ(last.slices.size(), 1u);
  EXPECT_EQ(last.slices[0].token_count, 36);
  EXPECT_EQ(last.slices[0].compress_evict, 48);
  EXPECT_EQ(last.slices[0].compress_window, 16);
  EXPECT_EQ(last.slices[0].page_table.size(), 7u);
  scheduler.complete_step(last, model.run(last));
  EXPECT_EQ(scheduler.find(1)->pages.size(), 4u);  // 52 slots
  EXPECT_EQ(scheduler.pool().used_pages(), 4);
  EXPECT_EQ(scheduler.compressions(), 1u);
  EXPECT_EQ(scheduler.compressed_pages(), 3u);
  // Decoding goes on at position 100, slot 52; no second compression.
  StepPlan decode = scheduler.plan_step();
  ASSERT_EQ(decode.slices.size(), 1u);
  EXPECT_EQ(decode.positions[0], 100);
  EXPECT_EQ(decode.slices[0].slot_offset, 48);
  EXPECT_EQ(decode.slices[0].compress_evict, 0);
  scheduler.complete_step(decode, model.run(decode));
  for (int i = 0; i < 20 && scheduler.find(1)->generated() < 10; ++i) {
    StepPlan plan = scheduler.plan_step();
    scheduler.complete_step(plan, model.run(plan));
  }
  const Sequence* s = scheduler.find(1);
  EXPECT_EQ(std::vector<std::int32_t>(s->tokens.begin() + 100, s->tokens.end()),
            reference_output(prompt, 10));
  EXPECT_TRUE(scheduler.remove(1));
  EXPECT_EQ(scheduler.pool().free_pages(), 64);
}

TEST(SchedulerKvCompress, ShortPromptsAndRateZeroAreNotCompressed) {
  for (const double rate : {0.0, 0.5}) {
    Scheduler scheduler(compress_config(4, 64, rate, 16));
    FakeModel model(scheduler, 2);
    ASSERT_TRUE(scheduler.add(1, std::vector<std::int32_t>(18, 3), 2).ok());  // 18 - 16 < 4
    StepPlan plan = scheduler.plan_step();
    EXPECT_EQ(plan.slices.at(0).compress_evict, 0) << "rate " << rate;
    scheduler.complete_step(plan, model.run(plan));
  }
}

TEST(SchedulerKvCompress, ASequenceHoldingCachedPagesIsNotCompressedNorCachedOnceCompressed) {
  SchedulerConfig c = compress_config(4, 64, 0.5, 8);
  c.prefix_cache = true;
  Scheduler scheduler(c);
  FakeModel model(scheduler, 3);
  std::vector<std::int32_t> prompt(40), other(40);
  for (int i = 0; i < 40; ++i) {
    prompt[static_cast<std::size_t>(i)] = i % 50;
    other[static_cast<std::size_t>(i)] = (i * 3 + 1) % 50;
  }
  // Runs a request to its end; returns the eviction its prompt's last chunk asked for.
  auto run = [&](std::uint64_t id, std::vector<std::int32_t> tokens) {
    EXPECT_TRUE(scheduler.add(id, tokens, 3).ok());
    int evict = 0;
    for (int i = 0; i < 10 && scheduler.find(id)->generated() < 3; ++i) {
      StepPlan plan = scheduler.plan_step();
      for (const auto& slice : plan.slices)
        if (slice.samples && scheduler.find(id)->generated() == 0) evict = slice.compress_evict;
      scheduler.complete_step(plan, model.run(plan));
    }
    const Sequence* s = scheduler.find(id);
    EXPECT_EQ(std::vector<std::int32_t>(s->tokens.begin() + s->prompt_len, s->tokens.end()),
              reference_output(tokens, 3));
    EXPECT_TRUE(scheduler.remove(id));
    return evict;
  };
  // 10 tokens: too short to evict a page past its window of 8; its 12 computed slots are
  // cached (3 pages).
  EXPECT_EQ(run(1, std::vector<std::int32_t>(prompt.begin(), prompt.begin() + 10)), 0);
  EXPECT_EQ(scheduler.prefix_cache_stats().cached_pages, 3);
  // The whole prompt starts from those cached pages: holding shared pages, it is not
  // compressed (its pages join the cache).
  EXPECT_EQ(run(2, prompt), 0);
  // Its first two pages (the third holds run 1's output, not this prompt).
  EXPECT_EQ(scheduler.prefix_cache_stats().hit_tokens, 8u);
  const int cached = scheduler.prefix_cache_stats().cached_pages;
  EXPECT_EQ(cached, 11);  // 42 computed slots: 10 full pages, 2 of them run 1's, and run 1's third
  // Another prompt of 40 is compressed by 20 slots, and its pages go back to the pool.
  EXPECT_EQ(run(3, other), 20);
  EXPECT_EQ(scheduler.prefix_cache_stats().cached_pages, cached);
  EXPECT_EQ(scheduler.pool().held_pages(), 0);
  EXPECT_EQ(scheduler.pool().free_pages(), 64 - cached);
}

TEST(SchedulerKvCompress, SpeculationIsRefused) {
  Scheduler scheduler(compress_config(4, 16, 0.5, 4));
  SpeculationConfig spec;
  spec.propose = [](const Sequence&, int, int) { return speculative::DraftTree{}; };
  EXPECT_THROW(scheduler.set_speculation(spec), Error);
}

TEST(SchedulerKvCompress, BadRateOrWindowIsAClearError) {
  try {
    Scheduler scheduler(compress_config(4, 16, 1.0, 4));
    ADD_FAILURE() << "rate 1 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_compress_rate: 1 is outside [0, 1)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(Scheduler(compress_config(4, 16, 0.5, 0)), Error);
}

// A small pool filled by compressing requests sharing system prompts through the prefix cache
// (whose uncompressed holders are not compressed), siblings, cancellations and (optimistic)
// preemptions: every output equals the uncompressed reference, every compression frees its
// pages, and every page returns to the pool.
void stress(AdmissionPolicy admission, int page_size, double rate, unsigned seed) {
  SCOPED_TRACE(testing::Message() << "page_size " << page_size << " rate " << rate << " seed "
                                  << seed);
  kv::PagePool pool(192 / page_size, page_size);
  std::mt19937 rng(seed);
  std::uint64_t compressions = 0;
  std::uint64_t hits = 0;
  {
    SchedulerConfig c = compress_config(page_size, 0, rate, 2 * page_size);
    c.admission = admission;
    c.prefix_cache = true;
    Scheduler scheduler(c, pool);
    FakeModel model(scheduler, seed);
    std::vector<std::vector<std::int32_t>> systems;
    for (int s = 0; s < 3; ++s) {
      std::vector<std::int32_t> sys;
      for (int i = 0; i < 16 + 8 * s; ++i)
        sys.push_back(static_cast<std::int32_t>(rng() % 50));
      systems.push_back(sys);
    }
    struct Expect {
      std::vector<std::int32_t> prompt;
      int max_new;
    };
    std::map<std::uint64_t, Expect> live;
    std::uint64_t next_id = 1;
    int finished = 0;
    for (int step = 0; step < 1500; ++step) {
      if (rng() % 3 == 0 && scheduler.waiting() < 6) {
        std::vector<std::int32_t> prompt;
        if (rng() % 2 == 0) prompt = systems[rng() % systems.size()];
        const int user = 1 + static_cast<int>(rng() % 60);
        for (int i = 0; i < user; ++i)
          prompt.push_back(static_cast<std::int32_t>(rng() % 50));
        const int max_new = 1 + static_cast<int>(rng() % 16);
        const std::uint64_t id = next_id++;
        ASSERT_TRUE(scheduler.add(id, prompt, max_new).ok());
        live[id] = {prompt, max_new};
        if (rng() % 6 == 0) {
          const std::uint64_t sib = next_id++;
          ASSERT_TRUE(scheduler.add_sibling(sib, id).ok());
          live[sib] = {prompt, max_new};
        }
      }
      if (!live.empty() && rng() % 25 == 0) {
        auto it = live.begin();
        std::advance(it, static_cast<long>(rng() % live.size()));
        EXPECT_TRUE(scheduler.remove(it->first));
        live.erase(it);
      }
      const int free_before = pool.free_pages() + pool.evictable_pages();
      StepPlan plan = scheduler.plan_step();
      const std::uint64_t freed_before = scheduler.compressed_pages();
      scheduler.complete_step(plan, model.run(plan));
      int asked = 0;
      for (const auto& slice : plan.slices)
        asked += slice.compress_evict / page_size;
      EXPECT_EQ(scheduler.compressed_pages() - freed_before, static_cast<std::uint64_t>(asked))
          << "a compression frees exactly its evicted pages";
      (void)free_before;
      for (const auto& slice : plan.slices) {
        auto it = live.find(slice.id);
        if (it == live.end()) continue;
        const Sequence* s = scheduler.find(slice.id);
        if (s->generated() < it->second.max_new) continue;
        std::vector<std::int32_t> out(s->tokens.begin() + s->prompt_len, s->tokens.end());
        EXPECT_EQ(out, reference_output(it->second.prompt, it->second.max_new))
            << "request " << slice.id;
        EXPECT_TRUE(scheduler.remove(slice.id));
        live.erase(it);
        ++finished;
      }
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_GT(finished, 100);
    if (admission == AdmissionPolicy::kReserve) {
      EXPECT_EQ(scheduler.preemptions(), 0u);
    }
    compressions = scheduler.compressions();
    hits = scheduler.prefix_cache_stats().hit_tokens;
    EXPECT_EQ(model.compressions, compressions);
    for (const auto& [id, e] : live)
      scheduler.remove(id);
    EXPECT_EQ(pool.held_pages(), 0);
  }
  EXPECT_GT(compressions, 20u);
  EXPECT_GT(hits, 0u);
  EXPECT_EQ(pool.free_pages(), pool.num_pages()) << "every page returns";
  EXPECT_EQ(pool.evictable_pages(), 0);
}

TEST(SchedulerKvCompress, StressReserveReturnsEveryPage) {
  for (const int page_size : {1, 4, 16})
    for (const double rate : {0.25, 0.75})
      stress(AdmissionPolicy::kReserve, page_size, rate, 7u + static_cast<unsigned>(page_size));
}

TEST(SchedulerKvCompress, StressOptimisticReturnsEveryPage) {
  for (const int page_size : {1, 4, 16})
    for (const double rate : {0.25, 0.5})
      stress(AdmissionPolicy::kOptimistic, page_size, rate, 19u + static_cast<unsigned>(page_size));
}

}  // namespace
}  // namespace weft::sched
