#pragma once
// What one forward step runs: a flat list of tokens from several sequences (prefill chunks and
// decode tokens alike, no padding), each token's position, and each sequence's page table.

#include <cstdint>
#include <vector>

namespace weft::model {

struct SequenceSlice {
  int token_begin = 0;  // first index into StepBatch::tokens
  int token_count = 0;
  // Page ids covering positions [0, last position]; position p lives in page
  // page_table[p / page_size] at slot p % page_size.
  std::vector<std::int32_t> page_table;
  // Logits for every token of the slice (prompt scoring) instead of only its last one.
  bool all_logits = false;
};

struct StepBatch {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> positions;  // one per token
  std::vector<SequenceSlice> sequences;

  // Rows of the logits the step returns, in sequence order.
  int logit_rows() const {
    int rows = 0;
    for (const auto& s : sequences)
      rows += s.all_logits ? s.token_count : (s.token_count > 0);
    return rows;
  }
};

}  // namespace weft::model
