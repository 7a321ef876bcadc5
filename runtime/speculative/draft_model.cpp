#include "runtime/speculative/draft_model.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

namespace weft::speculative {
namespace {

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

}  // namespace

DraftModel::DraftModel(const model::Model& model, int num_pages, int page_size, unsigned threads)
    : model_(model), kv_(model.kv_layout(page_size), num_pages), pool_(threads) {}

void DraftModel::forget(std::uint64_t sequence) {
  auto it = states_.find(sequence);
  if (it == states_.end()) return;
  for (auto page : it->second.pages)
    kv_.release_page(page);
  states_.erase(it);
}

bool DraftModel::reserve(State& state, int slots) {
  const int needed = kv_.pages_for(slots);
  while (static_cast<int>(state.pages.size()) < needed) {
    auto page = kv_.allocate_page();
    if (!page) return false;
    state.pages.push_back(*page);
  }
  return true;
}

DraftTree DraftModel::propose(std::uint64_t sequence, std::span<const std::int32_t> tokens,
                              const ProposalLimits& limits) {
  DraftTree out;
  const int n = static_cast<int>(tokens.size());
  const int max_depth = std::min(limits.max_depth, limits.max_nodes);
  const int width = std::max(1, limits.width);
  const int vocab = model_.spec().vocab_size;
  if (max_depth <= 0 || n < 1) return out;
  State& state = states_[sequence];
  state.computed = std::min(state.computed, n - 1);
  if (!reserve(state, n + limits.max_nodes)) return out;

  // Bring the draft's KV up to the sequence; the last token's logits start the tree.
  model::StepBatch batch;
  for (int p = state.computed; p < n; ++p) {
    batch.tokens.push_back(tokens[static_cast<std::size_t>(p)]);
    batch.positions.push_back(p);
  }
  batch.sequences.push_back({0, n - state.computed, state.pages, false, {}, 0});
  std::vector<float> logits;
  if (!model_.forward(batch, kv_, logits, pool_)) return out;
  ++passes_;
  state.computed = n;

  // The tree in the draft's numbering (depth by depth, slots n + node), with each node's
  // draft row for its children.
  struct Node {
    std::int32_t token;
    int parent;    // draft numbering, -1: the last token
    double score;  // log of the path's draft probability
  };
  std::vector<Node> nodes;
  std::vector<std::vector<float>> rows(1, logits);  // rows[u]: at node u - 1
  std::vector<std::vector<float>> q_at;             // sampled: q per row, by draft numbering + 1
  std::vector<std::vector<std::int32_t>> draws_at;
  std::mt19937_64 rng(limits.seed ^ (static_cast<std::uint64_t>(n) * 0x9E3779B97F4A7C15ull));
  std::vector<int> frontier = {-1};
  const bool sampled = limits.temperature > 0;
  if (sampled) {
    q_at.resize(1);
    draws_at.resize(1);
  }
  for (int depth = 1; depth <= max_depth; ++depth) {
    struct Candidate {
      int parent;
      std::int32_t token;
      double score;
    };
    std::vector<Candidate> candidates;
    for (int f : frontier) {
      const auto& row = rows[static_cast<std::size_t>(f + 1)];
      const double base = f < 0 ? 0.0 : nodes[static_cast<std::size_t>(f)].score;
      const auto p = softmax(row.data(), vocab, limits.temperature);
      if (!sampled) {
        std::vector<std::int32_t> ids(static_cast<std::size_t>(vocab));
        std::iota(ids.begin(), ids.end(), 0);
        const int k = std::min(width, vocab);
        std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](auto a, auto b) {
          const auto pa = p[static_cast<std::size_t>(a)], pb = p[static_cast<std::size_t>(b)];
          return pa != pb ? pa > pb : a < b;
        });
        for (int i = 0; i < k; ++i) {
          const auto id = ids[static_cast<std::size_t>(i)];
          candidates.push_back({f, id, base + std::log(p[static_cast<std::size_t>(id)])});
        }
        continue;
      }
      auto& q = q_at[static_cast<std::size_t>(f + 1)];
      auto& draws = draws_at[static_cast<std::size_t>(f + 1)];
      q.assign(p.begin(), p.end());
      std::discrete_distribution<std::int32_t> draw(p.begin(), p.end());
      const int m = f < 0 ? width : std::max(1, width / static_cast<int>(frontier.size()));
      for (int i = 0; i < m; ++i) {
        const std::int32_t id = draw(rng);
        draws.push_back(id);
        const bool seen = std::any_of(candidates.begin(), candidates.end(), [&](const auto& c) {
          return c.parent == f && c.token == id;
        });
        if (!seen) candidates.push_back({f, id, base + std::log(p[static_cast<std::size_t>(id)])});
      }
    }
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const auto& a, const auto& b) { return a.score > b.score; });
    const int room = limits.max_nodes - static_cast<int>(nodes.size());
    candidates.resize(static_cast<std::size_t>(
        std::clamp(std::min(width, room), 0, static_cast<int>(candidates.size()))));
    if (candidates.empty()) break;
    frontier.clear();
    for (const auto& c : candidates) {
      frontier.push_back(static_cast<int>(nodes.size()));
      nodes.push_back({c.token, c.parent, c.score});
    }
    if (depth == max_depth || static_cast<int>(nodes.size()) >= limits.max_nodes) break;
    // One forward over the new frontier, attending to the context and each node's ancestors.
    model::StepBatch step;
    model::SequenceSlice slice{0, static_cast<int>(frontier.size()), state.pages, true, {}, n};
    for (const auto& node : nodes)
      slice.tree_parent.push_back(node.parent);
    for (int f : frontier) {
      int d = 0;
      for (int a = f; a >= 0; a = nodes[static_cast<std::size_t>(a)].parent)
        ++d;
      step.tokens.push_back(nodes[static_cast<std::size_t>(f)].token);
      step.positions.push_back(n + d - 1);
    }
    step.sequences.push_back(std::move(slice));
    if (!model_.forward(step, kv_, logits, pool_)) break;
    ++passes_;
    rows.resize(nodes.size() + 1);
    if (sampled) {
      q_at.resize(nodes.size() + 1);
      draws_at.resize(nodes.size() + 1);
    }
    for (std::size_t i = 0; i < frontier.size(); ++i) {
      rows[static_cast<std::size_t>(frontier[i] + 1)].assign(
          logits.begin() + static_cast<std::ptrdiff_t>(i * static_cast<std::size_t>(vocab)),
          logits.begin() + static_cast<std::ptrdiff_t>((i + 1) * static_cast<std::size_t>(vocab)));
    }
  }

  // Out in pre-order, the most likely child first, so the first chain is the draft's best path.
  std::vector<int> order;  // draft numbering, in output order
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
    new_index[static_cast<std::size_t>(node)] = out.size();
    out.tokens.push_back(nodes[static_cast<std::size_t>(node)].token);
    out.parent.push_back(out_parent);
    order.push_back(node);
    push_children(node, out.size() - 1);
  }
  if (sampled) {
    out.q.resize(nodes.size() + 1);
    out.draws.resize(nodes.size() + 1);
    for (std::size_t u = 0; u < q_at.size(); ++u) {
      const int out_u = u == 0 ? 0 : new_index[u - 1] + 1;
      out.q[static_cast<std::size_t>(out_u)] = std::move(q_at[u]);
      out.draws[static_cast<std::size_t>(out_u)] = std::move(draws_at[u]);
    }
  }
  return out;
}

}  // namespace weft::speculative
