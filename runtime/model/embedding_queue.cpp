#include "runtime/model/embedding_queue.hpp"

#include <algorithm>

namespace weft::model {

void EmbeddingQueue::push(EmbedJob job) {
  Entry e;
  e.results.resize(job.sequences.size());
  e.job = std::move(job);
  jobs_.push_back(std::move(e));
}

std::size_t EmbeddingQueue::waiting_sequences() const noexcept {
  std::size_t n = 0;
  for (const auto& e : jobs_)
    n += e.job.sequences.size() - e.next;
  return n;
}

EmbeddingQueue::Step EmbeddingQueue::next_step() const {
  Step step;
  std::size_t tokens = 0;
  for (const auto& e : jobs_) {
    for (std::size_t i = e.next; i < e.job.sequences.size(); ++i) {
      const auto& seq = e.job.sequences[i];
      // The budget bounds the step, except that the first sequence always runs (the engine
      // refuses sequences longer than the model's positions, so this is bounded too).
      if (!step.owners.empty() && tokens + seq.size() > static_cast<std::size_t>(max_tokens_)) {
        return step;
      }
      step.batch.tokens.insert(step.batch.tokens.end(), seq.begin(), seq.end());
      step.batch.lengths.push_back(static_cast<int>(seq.size()));
      step.owners.emplace_back(e.job.id, i);
      tokens += seq.size();
    }
  }
  return step;
}

std::vector<std::pair<std::uint64_t, std::vector<std::vector<float>>>> EmbeddingQueue::finish(
    const Step& step, const std::vector<float>& hidden, int hidden_size) {
  std::size_t at = 0;
  for (std::size_t k = 0; k < step.owners.size(); ++k) {
    const auto [id, index] = step.owners[k];
    const int len = step.batch.lengths[k];
    auto it = std::find_if(jobs_.begin(), jobs_.end(),
                           [id = id](const Entry& e) { return e.job.id == id; });
    if (it != jobs_.end()) {
      it->results[index] =
          pool_hidden_states(hidden.data() + at * static_cast<std::size_t>(hidden_size), len,
                             hidden_size, it->job.pooling, it->job.normalize);
      it->next = std::max(it->next, index + 1);
    }
    at += static_cast<std::size_t>(len);
  }
  std::vector<std::pair<std::uint64_t, std::vector<std::vector<float>>>> done;
  while (!jobs_.empty() && jobs_.front().next == jobs_.front().job.sequences.size()) {
    done.emplace_back(jobs_.front().job.id, std::move(jobs_.front().results));
    jobs_.pop_front();
  }
  return done;
}

std::vector<std::uint64_t> EmbeddingQueue::fail(const Step& step) {
  std::vector<std::uint64_t> ids;
  for (const auto& [id, index] : step.owners) {
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  std::erase_if(jobs_, [&](const Entry& e) {
    return std::find(ids.begin(), ids.end(), e.job.id) != ids.end();
  });
  return ids;
}

std::vector<std::uint64_t> EmbeddingQueue::drain() {
  std::vector<std::uint64_t> ids;
  for (const auto& e : jobs_)
    ids.push_back(e.job.id);
  jobs_.clear();
  return ids;
}

}  // namespace weft::model
