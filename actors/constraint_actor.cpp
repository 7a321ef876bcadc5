#include "actors/constraint_actor.hpp"

#include <algorithm>
#include <atomic>
#include <boost/asio/post.hpp>
#include <chrono>
#include <future>

namespace weft::actors {
namespace {

using Clock = std::chrono::steady_clock;

std::uint64_t ns_since(Clock::time_point start) {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start).count());
}

}  // namespace

ConstraintActor::ConstraintActor(const asio::any_io_executor& executor, int logits_vocab,
                                 bool jump_forward, asio::thread_pool* mask_pool)
    : Actor(executor), vocab_(logits_vocab), jump_forward_(jump_forward), mask_pool_(mask_pool) {}

void ConstraintActor::add(std::uint64_t id,
                          std::shared_ptr<const grammar::CompiledGrammar> grammar) {
  post([this, id, grammar = std::move(grammar)]() mutable {
    constraints_.insert_or_assign(id, grammar::TokenConstraint(std::move(grammar), vocab_));
  });
}

void ConstraintActor::remove(std::uint64_t id) {
  post([this, id] { constraints_.erase(id); });
}

AcceptResult ConstraintActor::accept_tokens(const std::vector<AcceptedToken>& tokens) {
  const auto start = Clock::now();
  AcceptResult out;
  for (const auto& t : tokens) {
    auto it = constraints_.find(t.id);
    if (it == constraints_.end()) continue;
    using Verdict = grammar::TokenConstraint::Verdict;
    ConstraintVerdict v{t.id, it->second.accept(t.token), {}, {}};
    if (v.verdict == Verdict::kRejected && it->second.error() != nullptr)
      v.error = it->second.error()->what();
    if (v.verdict == Verdict::kContinue && jump_forward_ && t.max_forced > 0) {
      auto forced = it->second.jump_forward(t.max_forced);
      v.verdict = forced.verdict;
      v.forced = std::move(forced.tokens);
    }
    if (v.verdict != Verdict::kContinue || !v.forced.empty()) out.verdicts.push_back(std::move(v));
  }
  out.compute_ns = ns_since(start);
  return out;
}

StepMasks ConstraintActor::compute_masks(const std::vector<std::uint64_t>& ids) {
  const auto start = Clock::now();
  StepMasks out;
  const std::size_t words = (static_cast<std::size_t>(std::max(vocab_, 0)) + 31) / 32;
  out.words_per_mask = static_cast<int>(words);
  out.offsets.assign(ids.size(), -1);
  std::vector<grammar::TokenConstraint*> rows;  // per mask of `words`, in order
  for (std::size_t i = 0; i < ids.size(); ++i) {
    auto it = constraints_.find(ids[i]);
    if (it == constraints_.end()) continue;
    if (!it->second.mask_ready()) ++out.computed;
    out.offsets[i] = static_cast<std::int32_t>(rows.size() * words);
    rows.push_back(&it->second);
  }
  out.words.resize(rows.size() * words);
  // Each row's mask into its place; rows are independent (their grammars' shared mask caches
  // are thread-safe), so with a pool the rows are dealt out to its threads and this one.
  const auto fill = [&](std::size_t k) {
    const std::vector<std::uint32_t>& mask = rows[k]->next_mask();
    std::copy(mask.begin(), mask.end(), out.words.begin() + static_cast<std::ptrdiff_t>(k * words));
  };
  const std::size_t helpers =
      mask_pool_ != nullptr && out.computed >= 4 ? std::min<std::size_t>(rows.size() / 4, 4) : 0;
  if (helpers == 0) {
    for (std::size_t k = 0; k < rows.size(); ++k)
      fill(k);
  } else {
    std::atomic<std::size_t> next{0};
    const auto work = [&] {
      for (std::size_t k; (k = next.fetch_add(1)) < rows.size();)
        fill(k);
    };
    std::vector<std::future<void>> done;
    for (std::size_t h = 0; h < helpers; ++h) {
      std::packaged_task<void()> task(work);
      done.push_back(task.get_future());
      asio::post(*mask_pool_, std::move(task));
    }
    work();
    for (auto& d : done)
      d.get();  // next_mask does not throw but for allocation; rethrown here
  }
  out.compute_ns = ns_since(start);
  return out;
}

}  // namespace weft::actors
