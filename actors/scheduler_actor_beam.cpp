// Beam search in the step loop: a request's beams are sequences of one scheduler beam group
// (runtime/scheduler/beam_fork.cpp); each step their rows' most likely tokens come back from
// the sampler, and once every live beam has its row the BeamSearch policy
// (runtime/sampling/beam_search.hpp) decides which beams continue, fork or end. A fork shares
// its parent's KV pages; a beam that ends gives its pages back at once.
#include <algorithm>
#include <boost/asio/use_awaitable.hpp>

#include "actors/scheduler_actor.hpp"
#include "weft/log.hpp"

namespace weft::actors {

void SchedulerActor::add_beam_request(std::uint64_t id, std::vector<std::int32_t> prompt,
                                      const SamplingParams& params,
                                      std::shared_ptr<RequestStream> stream) {
  const int prompt_len = static_cast<int>(prompt.size());
  auto added = scheduler_.add_beam(id, std::move(prompt), params.max_tokens, params.beam_width);
  if (!added) throw added.error();
  sampling::BeamSearch::Config config;
  config.width = params.beam_width;
  config.length_penalty = params.length_penalty;
  config.max_tokens = params.max_tokens;
  config.stop_ids = params.stop_token_ids;
  if (!params.ignore_eos) {
    config.stop_ids.insert(config.stop_ids.end(), eos_ids_.begin(), eos_ids_.end());
  }
  std::sort(config.stop_ids.begin(), config.stop_ids.end());
  config.stop_ids.erase(std::unique(config.stop_ids.begin(), config.stop_ids.end()),
                        config.stop_ids.end());
  BeamGroupState group{sampling::BeamSearch(std::move(config)), {id}, {}};
  beam_groups_.emplace(id, std::move(group));
  beam_of_[id] = id;
  // The n results are the request's samples id .. id + n - 1 (their streams' indices); the
  // first id is also the first beam's sequence.
  const int n = std::max(1, params.n);
  std::vector<std::uint64_t>& slots = samples_[id];
  for (int i = 0; i < n; ++i) {
    slots.push_back(id + static_cast<std::uint64_t>(i));
    live_.emplace(id + static_cast<std::uint64_t>(i),
                  LiveRequest{stream, params, prompt_len, i, id, false});
  }
  metrics_.prompt_tokens += static_cast<std::uint64_t>(prompt_len);
}

int SchedulerActor::beam_row_k(std::uint64_t sequence) const {
  auto b = beam_of_.find(sequence);
  if (b == beam_of_.end()) return 0;
  auto g = beam_groups_.find(b->second);
  return g == beam_groups_.end() ? 0 : g->second.search.candidates_per_row();
}

void SchedulerActor::drop_beams(std::uint64_t request_id) {
  auto g = beam_groups_.find(request_id);
  if (g == beam_groups_.end()) return;
  for (std::uint64_t seq : g->second.beams) {
    scheduler_.remove(seq);
    if (seq != request_id) sampler_.remove(seq);  // the request's own id is sample 0's too
    beam_of_.erase(seq);
  }
  beam_groups_.erase(g);
}

asio::awaitable<void> SchedulerActor::advance_beams(std::vector<SampleOutcome>& outcomes) {
  std::vector<std::uint64_t> touched;
  std::vector<std::pair<std::uint64_t, std::string>> failed;
  auto is_beam = [this](const SampleOutcome& o) { return beam_of_.count(o.id) != 0; };
  for (auto& o : outcomes) {
    if (!is_beam(o)) continue;
    const std::uint64_t request = beam_of_.at(o.id);
    if (!o.error.empty()) {
      failed.emplace_back(o.id, o.error);
      continue;
    }
    beam_groups_.at(request).rows[o.id] = std::move(o.beam);
    if (std::find(touched.begin(), touched.end(), request) == touched.end()) {
      touched.push_back(request);
    }
  }
  std::erase_if(outcomes, is_beam);
  for (const auto& [seq, error] : failed)
    finish(seq, FinishReason::kError, error);

  for (std::uint64_t request : touched) {
    auto g = beam_groups_.find(request);
    if (g == beam_groups_.end()) continue;  // ended above
    BeamGroupState& group = g->second;
    // Every live beam must have its row (a fork's prefill may take another step).
    const bool complete = std::all_of(group.beams.begin(), group.beams.end(),
                                      [&](auto seq) { return group.rows.count(seq) != 0; });
    if (!complete) continue;
    std::vector<std::vector<sampling::TokenLogprob>> rows;
    rows.reserve(group.beams.size());
    for (std::uint64_t seq : group.beams)
      rows.push_back(std::move(group.rows.at(seq)));
    group.rows.clear();
    const std::vector<sampling::BeamSearch::Extension> extensions = group.search.step(rows);

    // The next beams: a parent's first extension continues its sequence; the others fork it
    // (before the parent's token is appended: a fork copies the parent's tokens); parents with
    // no extension end and give their pages back.
    std::vector<std::uint64_t> next(extensions.size());
    std::vector<bool> continued(group.beams.size(), false);
    std::vector<bool> forked(extensions.size(), false);
    std::string fork_error;
    for (std::size_t j = 0; j < extensions.size(); ++j) {
      const auto parent_index = static_cast<std::size_t>(extensions[j].parent);
      const std::uint64_t parent = group.beams[parent_index];
      if (!continued[parent_index]) {
        continued[parent_index] = true;
        next[j] = parent;
        continue;
      }
      const std::uint64_t child = next_fork_id_++;
      const std::int32_t token = extensions[j].token;
      if (auto made = scheduler_.fork(parent, child, std::span<const std::int32_t>(&token, 1));
          !made) {
        fork_error = made.error().what();
        break;
      }
      sampler_.fork(parent, child);
      sampler_.accept(child, {token});
      beam_of_[child] = request;
      next[j] = child;
      forked[j] = true;
    }
    if (!fork_error.empty()) {
      // Forks made so far are beams of the group too, so they are dropped with it.
      for (std::uint64_t seq : next)
        if (seq != 0 && std::find(group.beams.begin(), group.beams.end(), seq) == group.beams.end())
          group.beams.push_back(seq);
      log_error("beam search: " + fork_error);
      finish(request, FinishReason::kError, "beam search: " + fork_error);
      continue;
    }
    for (std::size_t j = 0; j < extensions.size(); ++j) {
      if (forked[j]) continue;  // its token came with the fork
      const std::uint64_t seq = next[j];
      const std::int32_t token = extensions[j].token;
      scheduler_.append_tokens(seq, std::span<const std::int32_t>(&token, 1));
      sampler_.accept(seq, {token});
    }
    for (std::size_t i = 0; i < group.beams.size(); ++i) {
      if (continued[i]) continue;
      const std::uint64_t seq = group.beams[i];
      scheduler_.remove(seq);
      if (seq != request) sampler_.remove(seq);
      beam_of_.erase(seq);
    }
    group.beams = std::move(next);
    if (!group.search.done()) continue;

    // Done: the n best hypotheses become the request's samples.
    const std::vector<std::uint64_t> slots =
        samples_.count(request) ? samples_.at(request) : std::vector<std::uint64_t>{};
    const std::vector<sampling::BeamSearch::Hypothesis> best =
        group.search.best(static_cast<int>(slots.size()));
    drop_beams(request);
    std::vector<NewToken> tokens;
    for (std::size_t i = 0; i < best.size(); ++i) {
      const auto& beam = best[i].beam;
      for (std::size_t t = 0; t < beam.tokens.size(); ++t) {
        NewToken nt;
        nt.id = slots[i];
        nt.token.id = beam.tokens[t];
        nt.token.logprob = beam.logprobs[t];
        nt.last = t + 1 == beam.tokens.size();
        tokens.push_back(std::move(nt));
      }
      metrics_.generated_tokens += beam.tokens.size();
    }
    std::vector<std::uint64_t> stopped;
    std::string detokenize_error;
    if (!tokens.empty()) {
      try {
        stopped = co_await detokenizer_.process(std::move(tokens), asio::use_awaitable);
      } catch (const std::exception& e) {
        detokenize_error = std::string("detokenizer: ") + e.what();
      }
    }
    for (std::size_t i = 0; i < slots.size(); ++i) {
      if (!detokenize_error.empty()) {
        finish(slots[i], FinishReason::kError, detokenize_error);
        continue;
      }
      if (i >= best.size()) {  // fewer finished hypotheses than n (a tiny vocabulary)
        finish(slots[i], FinishReason::kStop, {}, 0);
        continue;
      }
      const bool stop =
          best[i].stopped || std::find(stopped.begin(), stopped.end(), slots[i]) != stopped.end();
      finish(slots[i], stop ? FinishReason::kStop : FinishReason::kLength, {},
             static_cast<int>(best[i].beam.tokens.size()));
    }
  }
}

}  // namespace weft::actors
