#include "runtime/speculative/verify.hpp"

#include <algorithm>

namespace weft::speculative {
namespace {

// The node under `u` (u = 0: the root) carrying `token`, or -1.
int child_with(const DraftTree& tree, int u, std::int32_t token) {
  for (int j = u; j < tree.size(); ++j) {  // children come after their parent
    if (tree.parent[static_cast<std::size_t>(j)] == u - 1 &&
        tree.tokens[static_cast<std::size_t>(j)] == token) {
      return j;
    }
  }
  return -1;
}

}  // namespace

std::vector<std::int32_t> TreeVerdict::tokens(const DraftTree& tree) const {
  std::vector<std::int32_t> out;
  for (int j : accepted)
    out.push_back(tree.tokens[static_cast<std::size_t>(j)]);
  out.push_back(bonus);
  return out;
}

std::int32_t sample_from(std::span<const double> p, double u) {
  double total = 0;
  for (double x : p)
    total += x;
  const double target = u * total;
  double sum = 0;
  std::int32_t last = -1;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) continue;
    sum += p[i];
    last = static_cast<std::int32_t>(i);
    if (sum > target) return last;
  }
  return last;
}

NodeVerdict verify_node(std::vector<double>& p, std::span<const std::int32_t> draws,
                        std::span<const float> q, const Uniform& uniform) {
  for (std::size_t d = 0; d < draws.size(); ++d) {
    const auto x = static_cast<std::size_t>(draws[d]);
    const double qx = q.empty() ? 1.0 : static_cast<double>(q[x]);
    const double r = uniform();
    if (qx > 0 && r * qx < p[x]) return {static_cast<int>(d), draws[d]};  // r < p(x) / q(x)
    // Rejected: p <- norm(max(0, p - q)). If that leaves nothing (p == q up to rounding),
    // p stays: the rejection had probability 0 and the next trial is as good as any.
    std::vector<double> residual(p.size());
    double mass = 0;
    if (q.empty()) {
      residual = p;
      residual[x] = 0;
      for (double v : residual)
        mass += v;
    } else {
      for (std::size_t i = 0; i < p.size(); ++i) {
        residual[i] = std::max(0.0, p[i] - static_cast<double>(q[i]));
        mass += residual[i];
      }
    }
    if (mass > 0) {
      for (std::size_t i = 0; i < p.size(); ++i)
        p[i] = residual[i] / mass;
    }
  }
  return {-1, sample_from(p, uniform())};
}

TreeVerdict verify_greedy(const DraftTree& tree, const std::function<std::int32_t(int)>& target) {
  TreeVerdict verdict;
  int u = 0;
  for (;;) {
    const std::int32_t token = target(u);
    const int child = child_with(tree, u, token);
    if (child < 0) {
      verdict.bonus = token;
      return verdict;
    }
    verdict.accepted.push_back(child);
    u = child + 1;
  }
}

TreeVerdict verify_stochastic(const DraftTree& tree,
                              const std::function<std::vector<double>(int)>& target,
                              const Uniform& uniform) {
  TreeVerdict verdict;
  int u = 0;
  std::vector<std::int32_t> children;
  for (;;) {
    std::vector<double> p = target(u);
    std::span<const std::int32_t> draws;
    std::span<const float> q;
    if (tree.sampled()) {
      draws = tree.draws[static_cast<std::size_t>(u)];
      q = tree.q[static_cast<std::size_t>(u)];
    } else {
      children.clear();
      for (int j = u; j < tree.size(); ++j)
        if (tree.parent[static_cast<std::size_t>(j)] == u - 1)
          children.push_back(tree.tokens[static_cast<std::size_t>(j)]);
      draws = children;
    }
    const NodeVerdict node = verify_node(p, draws, q, uniform);
    const int child = node.accepted_draw >= 0 ? child_with(tree, u, node.token) : -1;
    if (child < 0) {
      verdict.bonus = node.token;
      return verdict;
    }
    verdict.accepted.push_back(child);
    u = child + 1;
  }
}

}  // namespace weft::speculative
