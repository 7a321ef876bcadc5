#pragma once
// LightLLM's router estimate (seed 004): the most KV a batch will ever hold if every request
// runs to its maximum output. Sort requests by remaining output length, longest first; when
// the i-th of them finishes, the i + 1 requests sorted before it (itself included) are all
// still alive and each has grown by its remaining length, while every later one has already
// finished and freed its pages. The peak is the largest of these n moments. Fixed pages
// (KvDemand::fixed_pages) count while their sequence is alive.

#include <cstdint>
#include <vector>

namespace weft::sched {

struct KvDemand {
  int tokens_now = 0;      // tokens the sequence holds (or will hold once prefilled)
  int tokens_to_come = 0;  // output tokens it may still generate
  // Pages it holds from admission to its end whatever its length (an encoder-decoder
  // sequence's cross-attention keys and values).
  int fixed_pages = 0;
};

// Peak pages over the batch's future, in pages of `page_size` tokens. Rounding each sequence
// up to whole pages is bounded by adding page_size - 1 tokens per live sequence, so the
// estimate never falls below the real need (for page_size 1 it is exact).
std::int64_t peak_pages(std::vector<KvDemand> demands, int page_size);

}  // namespace weft::sched
