#include "runtime/speculative/draft_model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "runtime/sampling/device_sampling.hpp"

namespace weft::speculative {
namespace {

// A proposal's first forward catches up at most this many tokens of a sequence in its own
// slice (what the last verification accepted beyond the draft's chain, and the bonus token);
// more (a prompt) are run first in passes of kCatchUpChunk tokens a sequence.
constexpr int kInlineCatchUp = 8;
constexpr int kCatchUpChunk = 512;

struct Choice {
  std::int32_t id;
  double logp;  // the draft's log probability
};

// softmax(row / temperature) in double precision; temperature 0 counts as 1 (for scores).
std::vector<double> softmax(const float* row, int vocab, float temperature) {
  const double t = temperature > 0 ? temperature : 1.0;
  const float max = *std::max_element(row, row + vocab);
  std::vector<double> p(static_cast<std::size_t>(vocab));
  double sum = 0;
  for (int i = 0; i < vocab; ++i) {
    p[static_cast<std::size_t>(i)] = std::exp((static_cast<double>(row[i]) - max) / t);
    sum += p[static_cast<std::size_t>(i)];
  }
  for (auto& x : p)
    x /= sum;
  return p;
}

// The k most likely tokens of a row (ties to the lower id), with their log probabilities.
std::vector<Choice> top_of_row(const float* row, int vocab, int k) {
  const float max = *std::max_element(row, row + vocab);
  double sum = 0;
  for (int i = 0; i < vocab; ++i)
    sum += std::exp(static_cast<double>(row[i]) - max);
  const double log_z = static_cast<double>(max) + std::log(sum);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  k = std::min(k, vocab);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(),
                    [&](auto a, auto b) { return row[a] != row[b] ? row[a] > row[b] : a < b; });
  std::vector<Choice> out;
  for (int i = 0; i < k; ++i)
    out.push_back({ids[static_cast<std::size_t>(i)],
                   static_cast<double>(row[ids[static_cast<std::size_t>(i)]]) - log_z});
  return out;
}

}  // namespace

struct DraftModel::Work {
  struct Node {
    std::int32_t token;
    int parent;             // draft numbering, -1: the last token
    double score;           // log of the path's draft probability
    bool computed = false;  // its KV is in slot n + its index
  };
  const ProposalRequest* request = nullptr;
  State* state = nullptr;
  int n = 0;
  int max_depth = 0;
  int width = 1;
  bool sampled = false;
  std::mt19937_64 rng;
  std::vector<Node> nodes;
  std::vector<int> frontier = {-1};
  // The current frontier's rows, in frontier order: greedy, the top `width` children;
  // sampled, the whole logit row.
  std::vector<std::vector<Choice>> tops;
  std::vector<std::vector<float>> rows;
  // Sampled: q and the draws at each expanded node, by draft numbering + 1.
  std::vector<std::vector<float>> q_at;
  std::vector<std::vector<std::int32_t>> draws_at;
  int row_begin = 0;  // the frontier's first logit row in the running step
  bool active = true;
};

DraftModel::DraftModel(std::unique_ptr<model::ForwardBackend> backend, int page_size)
    : backend_(std::move(backend)), page_size_(page_size) {
  for (int p = backend_->num_pages() - 1; p >= 0; --p)
    free_.push_back(p);
}

DraftModel::DraftModel(const model::Model& model, int num_pages, int page_size, unsigned threads)
    : DraftModel(std::make_unique<model::CpuForwardBackend>(model, model.kv_layout(page_size),
                                                            num_pages, threads),
                 page_size) {}

void DraftModel::forget(std::uint64_t sequence) {
  auto it = states_.find(sequence);
  if (it == states_.end()) return;
  for (auto page : it->second.pages)
    free_.push_back(page);
  states_.erase(it);
}

bool DraftModel::reserve(State& state, int slots) {
  const int needed = (slots + page_size_ - 1) / page_size_;
  const std::size_t had = state.pages.size();
  while (static_cast<int>(state.pages.size()) < needed) {
    if (free_.empty()) {
      // Not enough: give back what was taken now, so the others' proposals still fit.
      while (state.pages.size() > had) {
        free_.push_back(state.pages.back());
        state.pages.pop_back();
      }
      return false;
    }
    state.pages.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

DraftTree DraftModel::propose(std::uint64_t sequence, std::span<const std::int32_t> tokens,
                              const ProposalLimits& limits) {
  const ProposalRequest request{sequence, tokens, limits};
  return std::move(propose_batch(std::span(&request, 1)).front());
}

bool DraftModel::run_rows(model::StepBatch& batch, std::vector<Work*>& works) {
  const int vocab = backend_->spec().vocab_size;
  const bool any_sampled =
      std::any_of(works.begin(), works.end(), [](const Work* w) { return w->sampled; });
  ++passes_;
  tokens_run_ += batch.tokens.size();
  if (backend_->samples_on_device() && !any_sampled) {
    // Greedy: the device picks each row's argmax (width 1) or its top entries; only those
    // cross the bus.
    if (!backend_->launch(batch)) return false;
    model::DeviceSamplingInput input;
    for (const Work* w : works) {
      for (std::size_t i = 0; i < w->frontier.size(); ++i) {
        sampling::DeviceSampleRow row;
        row.row = w->row_begin + static_cast<int>(i);
        row.mode = sampling::DeviceSampleMode::kGreedy;
        row.logprobs = w->width > 1 ? std::min(w->width, sampling::kDeviceTopEntries) : 0;
        input.rows.push_back(row);
      }
    }
    model::DeviceSamplingOutput output;
    if (!backend_->sample(input, output)) return false;
    std::size_t k = 0;
    for (Work* w : works) {
      w->tops.assign(w->frontier.size(), {});
      for (std::size_t i = 0; i < w->frontier.size(); ++i, ++k) {
        const auto& r = output.results[k];
        auto& top = w->tops[i];
        if (r.status == sampling::DeviceSampleStatus::kHostRow && !output.host_rows[k].empty()) {
          top = top_of_row(output.host_rows[k].data(), vocab, w->width);
          continue;
        }
        if (r.status != sampling::DeviceSampleStatus::kOk) continue;  // no child here
        const double log_z =
            static_cast<double>(r.raw_max) + (r.raw_sum > 0 ? std::log(r.raw_sum) : 0.0);
        if (w->width == 1) {
          top.push_back({r.token, static_cast<double>(r.chosen_raw) - log_z});
          continue;
        }
        const auto* entries = output.top.data() + k * sampling::kDeviceTopEntries;
        const int count = std::clamp(r.top, 0, sampling::kDeviceTopEntries);
        std::vector<sampling::DeviceCandidate> sorted(entries, entries + count);
        std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
          return a.raw != b.raw ? a.raw > b.raw : a.id < b.id;
        });
        for (int j = 0; j < std::min(w->width, count); ++j)
          top.push_back({sorted[static_cast<std::size_t>(j)].id,
                         static_cast<double>(sorted[static_cast<std::size_t>(j)].raw) - log_z});
      }
    }
    return true;
  }
  if (!backend_->forward(batch, logits_)) return false;
  for (Work* w : works) {
    w->tops.assign(w->frontier.size(), {});
    w->rows.assign(w->frontier.size(), {});
    for (std::size_t i = 0; i < w->frontier.size(); ++i) {
      const float* row =
          logits_.data() + static_cast<std::size_t>(w->row_begin + static_cast<int>(i)) *
                               static_cast<std::size_t>(vocab);
      if (w->sampled) {
        w->rows[i].assign(row, row + vocab);
      } else {
        w->tops[i] = top_of_row(row, vocab, w->width);
      }
    }
  }
  return true;
}

void DraftModel::catch_up(std::vector<Work*>& works) {
  // Sequences far behind (a prompt) run all but their last kInlineCatchUp tokens here, several
  // sequences a pass, kCatchUpChunk tokens each; their logits are not needed.
  for (;;) {
    model::StepBatch batch;
    std::vector<std::pair<Work*, int>> ran;
    for (Work* w : works) {
      const int behind = w->n - 1 - w->state->computed;
      if (behind <= kInlineCatchUp) continue;
      const int count = std::min(kCatchUpChunk, behind - kInlineCatchUp + 1);
      model::SequenceSlice slice;
      slice.token_begin = static_cast<int>(batch.tokens.size());
      slice.token_count = count;
      slice.page_table = w->state->pages;
      for (int p = w->state->computed; p < w->state->computed + count; ++p) {
        batch.tokens.push_back(w->request->tokens[static_cast<std::size_t>(p)]);
        batch.positions.push_back(p);
      }
      batch.sequences.push_back(std::move(slice));
      ran.emplace_back(w, count);
    }
    if (ran.empty()) return;
    ++passes_;
    tokens_run_ += batch.tokens.size();
    bool ok = false;
    if (backend_->samples_on_device()) {
      model::DeviceSamplingOutput none;
      ok = backend_->launch(batch) && backend_->sample({}, none);  // waits, copies nothing
    } else {
      ok = static_cast<bool>(backend_->forward(batch, logits_));
    }
    for (auto [w, count] : ran) {
      if (ok) {
        w->state->computed += count;
      } else {
        w->active = false;
      }
    }
    if (!ok) return;
  }
}

std::vector<DraftTree> DraftModel::propose_batch(std::span<const ProposalRequest> requests) {
  std::vector<DraftTree> out(requests.size());
  std::vector<Work> works;
  works.reserve(requests.size());
  for (const auto& r : requests) {
    const int n = static_cast<int>(r.tokens.size());
    const int max_depth = std::min(r.limits.max_depth, r.limits.max_nodes);
    Work w;
    w.request = &r;
    if (max_depth <= 0 || n < 1) {
      w.active = false;
      works.push_back(std::move(w));
      continue;
    }
    State& state = states_[r.sequence];
    // The last proposal's first chain, where the sequence went on with it, is in place.
    if (!state.chain.empty()) {
      int k = 0;
      while (k < static_cast<int>(state.chain.size()) && state.computed + k < n - 1 &&
             r.tokens[static_cast<std::size_t>(state.computed + k)] ==
                 state.chain[static_cast<std::size_t>(k)])
        ++k;
      state.computed += k;
      reused_ += static_cast<std::uint64_t>(k);
      state.chain.clear();
    }
    state.computed = std::min(state.computed, n - 1);
    w.state = &state;
    w.n = n;
    w.max_depth = max_depth;
    w.width = backend_->supports_token_trees() ? std::max(1, r.limits.width) : 1;
    w.sampled = r.limits.temperature > 0;
    w.rng.seed(r.limits.seed ^ (static_cast<std::uint64_t>(n) * 0x9E3779B97F4A7C15ull));
    if (w.sampled) {
      w.q_at.resize(1);
      w.draws_at.resize(1);
    }
    w.active = reserve(state, n + r.limits.max_nodes);
    works.push_back(std::move(w));
  }
  std::vector<Work*> active;
  for (auto& w : works)
    if (w.active) active.push_back(&w);
  if (active.empty()) return out;
  catch_up(active);
  std::erase_if(active, [](const Work* w) { return !w->active; });

  // Every sequence's tokens the draft has not seen, in one pass: its last row starts the tree.
  {
    model::StepBatch batch;
    for (Work* w : active) {
      model::SequenceSlice slice;
      slice.token_begin = static_cast<int>(batch.tokens.size());
      slice.token_count = w->n - w->state->computed;
      slice.page_table = w->state->pages;
      // A few tokens run as decode rows (no prefill tile; a GPU replays the step's graph).
      slice.verify = slice.token_count > 1;
      for (int p = w->state->computed; p < w->n; ++p) {
        batch.tokens.push_back(w->request->tokens[static_cast<std::size_t>(p)]);
        batch.positions.push_back(p);
      }
      w->row_begin = static_cast<int>(batch.sequences.size());
      batch.sequences.push_back(std::move(slice));
    }
    // Greedy chains on a device that runs them: every depth enqueued at once, the argmaxes
    // fed back on the device, one wait and one copy of the ids for the whole chain.
    const bool chains = device_chains_ && backend_->runs_greedy_chains() &&
                        std::all_of(active.begin(), active.end(),
                                    [](const Work* w) { return w->width == 1 && !w->sampled; }) &&
                        std::all_of(active.begin(), active.end(), [&](const Work* w) {
                          // Every sequence runs the longest depth: its pages must cover it.
                          int steps = 0;
                          for (const Work* v : active)
                            steps = std::max(steps, v->max_depth);
                          return reserve(*w->state, w->n + steps);
                        });
    if (chains) {
      int steps = 0;
      for (const Work* w : active)
        steps = std::max(steps, w->max_depth);
      for (std::size_t i = 0; i < active.size(); ++i)  // with the pages just reserved
        batch.sequences[i].page_table = active[i]->state->pages;
      std::vector<std::int32_t> ids;
      const std::size_t first_tokens = batch.tokens.size();
      if (!backend_->greedy_chain(batch, steps, ids)) return out;
      passes_ += static_cast<std::uint64_t>(steps);
      tokens_run_ += first_tokens + static_cast<std::uint64_t>(steps - 1) * active.size();
      const std::size_t S = active.size();
      for (std::size_t i = 0; i < S; ++i) {
        Work* w = active[i];
        w->state->computed = w->n;
        for (int d = 0; d < w->max_depth; ++d) {
          const std::int32_t id = ids[static_cast<std::size_t>(d) * S + i];
          if (id < 0) break;
          w->nodes.push_back({id, d - 1, 0.0, d + 1 < steps});
        }
        w->active = false;
      }
      active.clear();
    } else {
      if (!run_rows(batch, active)) return out;
      for (Work* w : active)
        w->state->computed = w->n;
    }
  }

  for (int depth = 1; !active.empty(); ++depth) {  // (chains on the device are done)
    for (Work* w : active) {
      struct Candidate {
        int parent;
        std::int32_t token;
        double score;
      };
      std::vector<Candidate> candidates;
      for (std::size_t i = 0; i < w->frontier.size(); ++i) {
        const int f = w->frontier[i];
        const double base = f < 0 ? 0.0 : w->nodes[static_cast<std::size_t>(f)].score;
        if (!w->sampled) {
          for (const auto& c : w->tops[i])
            candidates.push_back({f, c.id, base + c.logp});
          continue;
        }
        const auto& row = w->rows[i];
        const auto p =
            softmax(row.data(), static_cast<int>(row.size()), w->request->limits.temperature);
        auto& q = w->q_at[static_cast<std::size_t>(f + 1)];
        auto& draws = w->draws_at[static_cast<std::size_t>(f + 1)];
        q.assign(p.begin(), p.end());
        std::discrete_distribution<std::int32_t> draw(p.begin(), p.end());
        const int m =
            f < 0 ? w->width : std::max(1, w->width / static_cast<int>(w->frontier.size()));
        for (int k = 0; k < m; ++k) {
          const std::int32_t id = draw(w->rng);
          draws.push_back(id);
          const bool seen = std::any_of(candidates.begin(), candidates.end(), [&](const auto& c) {
            return c.parent == f && c.token == id;
          });
          if (!seen) {
            candidates.push_back({f, id, base + std::log(p[static_cast<std::size_t>(id)])});
          }
        }
      }
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const auto& a, const auto& b) { return a.score > b.score; });
      const int room = w->request->limits.max_nodes - static_cast<int>(w->nodes.size());
      candidates.resize(static_cast<std::size_t>(
          std::clamp(std::min(w->width, room), 0, static_cast<int>(candidates.size()))));
      if (candidates.empty()) {
        w->active = false;
        continue;
      }
      w->frontier.clear();
      for (const auto& c : candidates) {
        w->frontier.push_back(static_cast<int>(w->nodes.size()));
        w->nodes.push_back({c.token, c.parent, c.score});
      }
      if (depth == w->max_depth ||
          static_cast<int>(w->nodes.size()) >= w->request->limits.max_nodes) {
        w->active = false;
      }
    }
    std::erase_if(active, [](const Work* w) { return !w->active; });
    if (active.empty()) break;
    // One forward over every new frontier, each attending to its context and its ancestors.
    model::StepBatch step;
    int rows = 0;
    for (Work* w : active) {
      model::SequenceSlice slice;
      slice.token_begin = static_cast<int>(step.tokens.size());
      slice.token_count = static_cast<int>(w->frontier.size());
      slice.page_table = w->state->pages;
      const bool chain = w->width == 1;  // node d - 1 at depth d: its slot is its position
      if (!chain) {
        slice.all_logits = true;
        slice.tree_first_slot = w->n;
        for (const auto& node : w->nodes)
          slice.tree_parent.push_back(node.parent);
      }
      for (int f : w->frontier) {
        int d = 0;
        for (int a = f; a >= 0; a = w->nodes[static_cast<std::size_t>(a)].parent)
          ++d;
        step.tokens.push_back(w->nodes[static_cast<std::size_t>(f)].token);
        step.positions.push_back(w->n + d - 1);
      }
      w->row_begin = rows;
      rows += static_cast<int>(w->frontier.size());
      step.sequences.push_back(std::move(slice));
    }
    if (!run_rows(step, active)) break;
    for (Work* w : active) {
      for (int f : w->frontier)
        w->nodes[static_cast<std::size_t>(f)].computed = true;
      if (w->sampled) {
        w->q_at.resize(w->nodes.size() + 1);
        w->draws_at.resize(w->nodes.size() + 1);
      }
    }
  }

  for (std::size_t r = 0; r < works.size(); ++r) {
    Work& w = works[r];
    if (w.state == nullptr) continue;
    // The first chain's computed prefix, at slots n, n + 1, ...: kept for the next proposal.
    for (std::size_t j = 0; j < w.nodes.size(); ++j) {
      if (w.nodes[j].parent != static_cast<int>(j) - 1 || !w.nodes[j].computed) break;
      w.state->chain.push_back(w.nodes[j].token);
    }
    if (w.state->computed != w.n) w.state->chain.clear();
    // Out in pre-order, the most likely child first, so the first chain is the draft's best
    // path.
    DraftTree& tree = out[r];
    const auto& nodes = w.nodes;
    std::vector<int> new_index(nodes.size(), -1);
    std::vector<std::pair<int, int>> stack;  // (node, output parent)
    auto push_children = [&](int parent, int out_parent) {
      std::vector<int> kids;
      for (std::size_t j = 0; j < nodes.size(); ++j)
        if (nodes[j].parent == parent) kids.push_back(static_cast<int>(j));
      std::stable_sort(kids.begin(), kids.end(), [&](int a, int b) {
        return nodes[static_cast<std::size_t>(a)].score > nodes[static_cast<std::size_t>(b)].score;
      });
      for (auto it = kids.rbegin(); it != kids.rend(); ++it)
        stack.emplace_back(*it, out_parent);
    };
    push_children(-1, -1);
    while (!stack.empty()) {
      const auto [node, out_parent] = stack.back();
      stack.pop_back();
      new_index[static_cast<std::size_t>(node)] = tree.size();
      tree.tokens.push_back(nodes[static_cast<std::size_t>(node)].token);
      tree.parent.push_back(out_parent);
      push_children(node, tree.size() - 1);
    }
    if (w.sampled && !nodes.empty()) {
      tree.q.resize(nodes.size() + 1);
      tree.draws.resize(nodes.size() + 1);
      for (std::size_t u = 0; u < w.q_at.size() && u <= nodes.size(); ++u) {
        const int out_u = u == 0 ? 0 : new_index[u - 1] + 1;
        tree.q[static_cast<std::size_t>(out_u)] = std::move(w.q_at[u]);
        tree.draws[static_cast<std::size_t>(out_u)] = std::move(w.draws_at[u]);
      }
    }
  }
  return out;
}

}  // namespace weft::speculative
