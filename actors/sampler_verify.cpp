// The sampler's half of speculative decoding (docs/speculative.md): a draft slice's rows of
// target logits verified against its tree, with the sequence's own sampler giving each node's
// target distribution (bias, temperature, truncation: everything sample() applies), so that a
// verified token is what plain sampling would draw: exactly greedy's argmax, or a draw from
// the same distribution (SpecInfer's multi-step speculative sampling).

#include <cmath>

#include "actors/sampler_actor.hpp"
#include "runtime/sampling/logit_row.hpp"
#include "runtime/sampling/philox.hpp"
#include "runtime/speculative/verify.hpp"

namespace weft::actors {
namespace {

// Keeps verification's uniforms apart from the sampler's own draws, which use the same seed
// at counter (sample index, step).
constexpr std::uint64_t kVerifyKey = 0x5be0cd19137e2179ull;

// The raw log-probability of `token` and the row's top entries, as sample() reports them.
sampling::SampledToken raw_token(const float* row, std::size_t vocab, std::int32_t token, int top) {
  const sampling::RowMax m = sampling::row_max(row, vocab);
  const double log_z =
      static_cast<double>(m.max) + std::log(sampling::sum_exp(row, vocab, m.max, 1.0f, nullptr));
  sampling::SampledToken out{token, static_cast<float>(row[token] - log_z), {}};
  if (top > 0) {
    out.top = sampling::top_entries(row, vocab, top);
    for (auto& t : out.top)
      t.logprob = static_cast<float>(t.logprob - log_z);
  }
  return out;
}

}  // namespace

std::vector<VerifyOutcome> SamplerActor::verify_rows(const StepLogits& logits,
                                                     const std::vector<VerifyRow>& rows) {
  std::vector<VerifyOutcome> out;
  const auto vocab = static_cast<std::size_t>(logits.vocab);
  for (const VerifyRow& r : rows) {
    VerifyOutcome outcome;
    outcome.id = r.id;
    auto it = samplers_.find(r.id);
    if (it == samplers_.end()) {
      outcome.error = "no sampler for request " + std::to_string(r.id);
      out.push_back(std::move(outcome));
      continue;
    }
    sampling::SequenceSampler& sampler = it->second;
    const auto row_at = [&](int u) {
      return logits.values.data() + static_cast<std::size_t>(r.first_row + u) * vocab;
    };
    std::string error;
    // The sampler's distribution at node u - 1 (on a copy: it edits the row as scratch).
    const auto distribution = [&](int u) -> std::vector<sampling::TokenLogprob> {
      std::vector<float> row(row_at(u), row_at(u) + vocab);
      auto d = sampler.distribution(row);
      if (!d) {
        if (error.empty()) error = d.error().what();
        return {};
      }
      return std::move(d.value());
    };
    speculative::TreeVerdict verdict;
    if (sampler.params().temperature == 0.0f) {
      verdict = speculative::verify_greedy(*r.tree, [&](int u) -> std::int32_t {
        auto d = distribution(u);
        return d.empty() ? -1 : d.front().id;
      });
    } else {
      std::uint64_t counter = static_cast<std::uint64_t>(sampler.generated()) << 20;
      verdict = speculative::verify_stochastic(
          *r.tree,
          [&](int u) {
            std::vector<double> p(vocab, 0.0);
            for (const auto& t : distribution(u))
              p[static_cast<std::size_t>(t.id)] = t.logprob;  // a probability here
            return p;
          },
          [&] {
            return sampling::philox_uniform(sampler.seed() ^ kVerifyKey,
                                            static_cast<std::uint32_t>(sampler.sample_index()),
                                            counter++);
          });
    }
    if (!error.empty() || verdict.bonus < 0) {
      outcome.error = error.empty() ? "verification found no token" : error;
      out.push_back(std::move(outcome));
      continue;
    }
    // Each output token is reported at the node it was drawn at, and recorded by the sampler
    // as if sampled (its step counter and penalty history).
    int u = 0;
    const auto tokens = verdict.tokens(*r.tree);
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      outcome.tokens.push_back(raw_token(row_at(u), vocab, tokens[k], sampler.params().logprobs));
      sampler.accept(tokens[k]);
      if (k < verdict.accepted.size()) u = verdict.accepted[k] + 1;
    }
    outcome.accepted = std::move(verdict.accepted);
    out.push_back(std::move(outcome));
  }
  return out;
}

void SamplerActor::prepare_verify_rows(DeviceSamplePlan& plan, std::vector<VerifyRow> verify,
                                       int vocab) {
  for (VerifyRow& v : verify) {
    plan.verify_row.push_back(-1);
    plan.verify_errors.emplace_back();
    auto it = samplers_.find(v.id);
    if (it == samplers_.end()) {
      plan.verify_errors.back() = "no sampler for request " + std::to_string(v.id);
    } else if (it->second.params().temperature != 0.0f) {
      plan.verify_errors.back() = "request " + std::to_string(v.id) +
                                  " samples: its draft is verified on the host, not the device";
    } else {
      // The root's row and each node's, all greedy draws as plain decoding's (bias included).
      const auto begin = static_cast<int>(plan.input.rows.size());
      for (int u = 0; u <= v.tree->size(); ++u) {
        auto row = it->second.device_row(vocab, plan.input.edits);
        if (!row) {
          plan.verify_errors.back() = row.error().what();
          break;
        }
        row->row = v.first_row + u;
        plan.input.rows.push_back(*row);
      }
      if (plan.verify_errors.back().empty()) {
        plan.verify_row.back() = begin;
      } else {
        plan.input.rows.resize(static_cast<std::size_t>(begin));
      }
    }
    plan.verify.push_back(std::move(v));
  }
}

std::vector<VerifyOutcome> SamplerActor::finish_verify_rows(const DeviceSamplePlan& plan,
                                                            model::DeviceSamplingOutput& output) {
  std::vector<VerifyOutcome> out;
  for (std::size_t k = 0; k < plan.verify.size(); ++k) {
    const VerifyRow& v = plan.verify[k];
    VerifyOutcome outcome;
    outcome.id = v.id;
    auto it = samplers_.find(v.id);
    if (plan.verify_row[k] < 0) {
      outcome.error = plan.verify_errors[k];
    } else if (it == samplers_.end()) {
      outcome.error = "no sampler for request " + std::to_string(v.id);
    }
    if (!outcome.error.empty()) {
      out.push_back(std::move(outcome));
      continue;
    }
    // Greedy verification: the device's pick at each node is the target's argmax there; follow
    // the child that carries it, and the pick at the first node without one is the bonus token.
    // Each pick is recorded by the sampler as plain device sampling records it.
    const speculative::DraftTree& tree = *v.tree;
    int u = 0;  // the row: 0 for the root, j + 1 for node j
    for (;;) {
      const auto at = static_cast<std::size_t>(plan.verify_row[k] + u);
      if (at >= output.results.size() || at >= output.host_rows.size() ||
          output.top.size() < (at + 1) * sampling::kDeviceTopEntries) {
        outcome.error = "the device returned no result for request " + std::to_string(v.id);
        break;
      }
      const auto top = std::span<const sampling::DeviceCandidate>(output.top)
                           .subspan(at * sampling::kDeviceTopEntries, sampling::kDeviceTopEntries);
      auto token = it->second.finish_device(output.results[at], output.candidates, top,
                                            output.host_rows[at]);
      if (!token) {
        outcome.error = token.error().what();
        break;
      }
      const std::int32_t id = token->id;
      outcome.tokens.push_back(std::move(token.value()));
      int child = -1;
      for (int j = 0; j < tree.size(); ++j) {
        if (tree.parent[static_cast<std::size_t>(j)] == u - 1 &&
            tree.tokens[static_cast<std::size_t>(j)] == id) {
          child = j;
          break;
        }
      }
      if (child < 0) break;
      outcome.accepted.push_back(child);
      u = child + 1;
    }
    if (!outcome.error.empty()) {
      outcome.tokens.clear();
      outcome.accepted.clear();
    }
    out.push_back(std::move(outcome));
  }
  return out;
}

}  // namespace weft::actors
