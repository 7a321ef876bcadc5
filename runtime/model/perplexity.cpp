#include "runtime/model/perplexity.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace weft::model {
namespace {

// log p(target) from one row of logits, computed stably in double precision.
double log_prob(const float* row, int vocab, std::uint32_t target) {
  float max = row[0];
  for (int i = 1; i < vocab; ++i)
    max = std::max(max, row[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i)
    sum += std::exp(static_cast<double>(row[i]) - max);
  return static_cast<double>(row[target]) - max - std::log(sum);
}

}  // namespace

Result<PerplexityResult> sliding_window_perplexity(const Model& model,
                                                   std::span<const std::uint32_t> ids,
                                                   const PerplexityOptions& o,
                                                   cpu::ThreadPool& pool,
                                                   const PerplexityProgress& progress) {
  if (o.window < 2 || o.stride < 1 || o.chunk < 1 || o.page_size < 1) {
    return Error(ErrorCode::kInvalidArgument,
                 "perplexity: window must be >= 2 and stride, chunk, page size >= 1");
  }
  if (auto ok = kv::check(o.kv_compress); !ok) {
    return Error(ErrorCode::kInvalidArgument, std::string("perplexity: ") + ok.error().what());
  }
  if (o.stride > o.window) {
    return Error(ErrorCode::kInvalidArgument,
                 "perplexity: stride " + std::to_string(o.stride) + " is larger than window " +
                     std::to_string(o.window) + ": tokens between windows would never be scored");
  }
  const int max_positions = model.spec().rope.max_position_embeddings;
  if (max_positions > 0 && o.window > max_positions) {
    return Error(ErrorCode::kInvalidArgument, "perplexity: window " + std::to_string(o.window) +
                                                  " exceeds the model's context of " +
                                                  std::to_string(max_positions) +
                                                  " positions (max_position_embeddings)");
  }
  const std::size_t n = ids.size();
  if (n < 2) {
    return Error(ErrorCode::kInvalidArgument,
                 "perplexity: the text has " + std::to_string(n) + " token(s); at least 2 needed");
  }
  const int vocab = model.spec().vocab_size;
  for (std::uint32_t id : ids) {
    if (id >= static_cast<std::uint32_t>(vocab)) {
      return Error(ErrorCode::kOutOfRange, "perplexity: token id " + std::to_string(id) +
                                               " is outside the vocabulary of " +
                                               std::to_string(vocab));
    }
  }

  KvLayout layout = model.kv_layout(o.page_size);
  layout.dtype = o.kv_dtype;
  KvCache kv(layout, (o.window + o.page_size - 1) / o.page_size);
  std::vector<std::int32_t> page_table;
  while (static_cast<int>(page_table.size()) < kv.num_pages()) {
    page_table.push_back(*kv.allocate_page());
  }

  double nll = 0;
  std::size_t scored = 0;
  std::vector<float> logits;
  // Feeds tokens [from, to) of the window that starts at `window_begin` (positions relative to
  // it) and, when `score`, adds -log p(next token) at each fed position.
  // KV-Compress: slots evicted from the current window's context.
  int evicted = 0;
  auto feed = [&](std::size_t window_begin, std::size_t from, std::size_t to,
                  bool score) -> Result<void> {
    const auto chunk = static_cast<std::size_t>(o.chunk);
    for (std::size_t c = from; c < to; c += chunk) {
      const std::size_t c_end = std::min(to, c + chunk);
      StepBatch step;
      for (std::size_t p = c; p < c_end; ++p) {
        step.tokens.push_back(static_cast<std::int32_t>(ids[p]));
        step.positions.push_back(static_cast<std::int32_t>(p - window_begin));
      }
      step.sequences.push_back({0, static_cast<int>(c_end - c), page_table, score});
      SequenceSlice& slice = step.sequences.back();
      slice.slot_offset = evicted;
      slice.compress_heads_vary = o.kv_compress.heads == kv::KvCompressHeads::kVariable;
      // The context's last chunk: compress what the window's scored tokens will read.
      const int evict =
          !score && c_end == to
              ? kv::evicted_slots(static_cast<int>(to - window_begin), o.kv_compress, o.page_size)
              : 0;
      if (evict > 0) {
        slice.compress_evict = evict;
        slice.compress_window = o.kv_compress.window;
      }
      auto ok = model.forward(step, kv, logits, pool);
      if (!ok) return ok;
      evicted += evict;
      if (!score) continue;
      for (std::size_t p = c; p < c_end; ++p) {
        nll -=
            log_prob(logits.data() + (p - c) * static_cast<std::size_t>(vocab), vocab, ids[p + 1]);
        ++scored;
      }
    }
    return {};
  };

  std::size_t prev_end = 0;
  for (std::size_t begin = 0; begin < n; begin += static_cast<std::size_t>(o.stride)) {
    const std::size_t end = std::min(begin + static_cast<std::size_t>(o.window), n);
    const std::size_t first = std::max(prev_end, begin + 1);  // first token scored here
    evicted = 0;  // a new window writes its cache from slot 0
    // Positions [begin, first - 1) are context only; [first - 1, end - 1) predict the scored
    // tokens [first, end).
    auto ok = feed(begin, begin, first - 1, /*score=*/false);
    if (ok) ok = feed(begin, first - 1, end - 1, /*score=*/true);
    if (!ok) return ok.error();
    prev_end = end;
    if (progress) progress(scored, n - 1);
    if (end == n) break;
  }
  PerplexityResult result;
  result.tokens_scored = scored;
  result.mean_nll = nll / static_cast<double>(scored);
  result.perplexity = std::exp(result.mean_nll);
  return result;
}

}  // namespace weft::model
