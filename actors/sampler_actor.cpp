#include "actors/sampler_actor.hpp"

#include <algorithm>

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

void SamplerActor::accept(std::uint64_t id, std::vector<std::int32_t> tokens) {
  post([this, id, tokens = std::move(tokens)] {
    auto it = samplers_.find(id);
    if (it == samplers_.end()) return;
    for (std::int32_t t : tokens)
      it->second.accept(t);
  });
}

void SamplerActor::fork(std::uint64_t parent, std::uint64_t child) {
  post([this, parent, child] {
    auto it = samplers_.find(parent);
    if (it != samplers_.end()) samplers_.insert_or_assign(child, it->second);
  });
}

// Why a row cannot be sampled before looking at its logits (empty: it can), and its sampler.
std::string SamplerActor::check_row(const SampleRow& r, std::size_t vocab,
                                    sampling::SequenceSampler*& sampler) {
  auto it = samplers_.find(r.id);
  if (it == samplers_.end()) return "no sampler for request " + std::to_string(r.id);
  if (!r.allowed.empty() && r.allowed.size() != (vocab + 31) / 32) {
    return "the bitmask of request " + std::to_string(r.id) + " has " +
           std::to_string(r.allowed.size()) + " words for a vocabulary of " + std::to_string(vocab);
  }
  sampler = &it->second;
  return {};
}

std::vector<SampleOutcome> SamplerActor::sample_rows(StepLogits& logits,
                                                     const std::vector<SampleRow>& rows) {
  std::vector<SampleOutcome> out;
  out.reserve(rows.size());
  const auto vocab = static_cast<std::size_t>(logits.vocab);
  for (const SampleRow& r : rows) {
    SampleOutcome outcome;
    outcome.id = r.id;
    sampling::SequenceSampler* sampler = nullptr;
    outcome.error = check_row(r, vocab, sampler);
    if (outcome.error.empty()) {
      std::span<float> row(logits.values.data() + static_cast<std::size_t>(r.row) * vocab, vocab);
      const std::uint32_t* allowed = r.allowed.empty() ? nullptr : r.allowed.data();
      if (r.beam_k > 0) {
        auto top = sampler->beam_candidates(row, allowed, r.beam_k);
        if (top) {
          outcome.beam = std::move(top.value());
        } else {
          outcome.error = top.error().what();
        }
        out.push_back(std::move(outcome));
        continue;
      }
      auto token = sampler->try_sample(row, r.allowed.empty() ? nullptr : r.allowed.data());
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

DeviceSamplePlan SamplerActor::prepare_rows(std::vector<SampleRow>& rows, int vocab,
                                            std::vector<std::uint32_t> masks) {
  DeviceSamplePlan plan;
  plan.input.masks = std::move(masks);
  const std::size_t step_words = plan.input.masks.size();
  const std::size_t words = (static_cast<std::size_t>(std::max(vocab, 0)) + 31) / 32;
  for (SampleRow& r : rows) {
    plan.ids.push_back(r.id);
    plan.device_row.push_back(-1);
    plan.errors.emplace_back();
    plan.beam_k.push_back(r.beam_k);
    sampling::SequenceSampler* sampler = nullptr;
    plan.errors.back() = check_row(r, static_cast<std::size_t>(vocab), sampler);
    if (!plan.errors.back().empty()) continue;
    auto row = r.beam_k > 0 ? sampler->beam_device_row(vocab, plan.input.edits)
                            : sampler->device_row(vocab, plan.input.edits);
    if (!row) {
      plan.errors.back() = row.error().what();
      continue;
    }
    row->row = r.row;
    if (r.mask_offset >= 0) {
      if (static_cast<std::size_t>(r.mask_offset) + words > step_words) {
        plan.errors.back() = "the bitmask of request " + std::to_string(r.id) + " at word " +
                             std::to_string(r.mask_offset) + " runs past the step's " +
                             std::to_string(step_words) + " mask words";
        continue;
      }
      row->mask_word_offset = r.mask_offset;
    } else if (!r.allowed.empty()) {
      row->mask_word_offset = static_cast<std::int32_t>(plan.input.masks.size());
      plan.input.masks.insert(plan.input.masks.end(), r.allowed.begin(), r.allowed.end());
    }
    plan.device_row.back() = static_cast<int>(plan.input.rows.size());
    plan.input.rows.push_back(*row);
  }
  return plan;
}

std::vector<SampleOutcome> SamplerActor::finish_rows(const DeviceSamplePlan& plan,
                                                     model::DeviceSamplingOutput& output) {
  std::vector<SampleOutcome> out;
  out.reserve(plan.ids.size());
  for (std::size_t k = 0; k < plan.ids.size(); ++k) {
    SampleOutcome outcome;
    outcome.id = plan.ids[k];
    const int d = plan.device_row[k];
    auto it = samplers_.find(outcome.id);
    if (d < 0) {
      outcome.error = plan.errors[k];
    } else if (it == samplers_.end()) {
      outcome.error = "no sampler for request " + std::to_string(outcome.id);
    } else if (static_cast<std::size_t>(d) >= output.results.size() ||
               output.top.size() <
                   (static_cast<std::size_t>(d) + 1) * sampling::kDeviceTopEntries ||
               output.host_rows.size() <= static_cast<std::size_t>(d)) {
      outcome.error = "the device returned no result for request " + std::to_string(outcome.id);
    } else {
      const auto at = static_cast<std::size_t>(d);
      if (k < plan.beam_k.size() && plan.beam_k[k] > 0) {
        auto beam = it->second.finish_beam_device(output.results[at], output.candidates,
                                                  output.host_rows[at], plan.beam_k[k]);
        if (beam) {
          outcome.beam = std::move(beam.value());
        } else {
          outcome.error = beam.error().what();
        }
        out.push_back(std::move(outcome));
        continue;
      }
      const auto top = std::span<const sampling::DeviceCandidate>(output.top)
                           .subspan(at * sampling::kDeviceTopEntries, sampling::kDeviceTopEntries);
      auto token = it->second.finish_device(output.results[at], output.candidates, top,
                                            output.host_rows[at]);
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
