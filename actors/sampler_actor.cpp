#include "actors/sampler_actor.hpp"

namespace weft::actors {

void SamplerActor::add(std::uint64_t id, sampling::SamplingParams params,
                       std::vector<std::int32_t> prompt, std::uint64_t seed, int sample_index) {
  post([this, id, params = std::move(params), prompt = std::move(prompt), seed, sample_index] {
    samplers_.insert_or_assign(id, sampling::SequenceSampler(params, prompt, seed, sample_index));
  });
}

void SamplerActor::remove(std::uint64_t id) {
  post([this, id] { samplers_.erase(id); });
}

std::vector<SampleOutcome> SamplerActor::sample_rows(StepLogits& logits,
                                                     const std::vector<SampleRow>& rows) {
  std::vector<SampleOutcome> out;
  out.reserve(rows.size());
  const auto vocab = static_cast<std::size_t>(logits.vocab);
  for (const SampleRow& r : rows) {
    SampleOutcome outcome;
    outcome.id = r.id;
    auto it = samplers_.find(r.id);
    if (it == samplers_.end()) {
      outcome.error = "no sampler for request " + std::to_string(r.id);
    } else {
      std::span<float> row(logits.values.data() + static_cast<std::size_t>(r.row) * vocab, vocab);
      if (!r.allowed.empty() && r.allowed.size() != (vocab + 31) / 32) {
        outcome.error = "the bitmask of request " + std::to_string(r.id) + " has " +
                        std::to_string(r.allowed.size()) + " words for a vocabulary of " +
                        std::to_string(vocab);
        out.push_back(std::move(outcome));
        continue;
      }
      auto token = it->second.try_sample(row, r.allowed.empty() ? nullptr : r.allowed.data());
      if (token) {
        outcome.token = std::move(token.value());
      } else {
        outcome.error = token.error().what();
      }
    }
    out.push_back(std::move(outcome));
  }
  return out;
}

}  // namespace weft::actors
