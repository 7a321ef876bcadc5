#pragma once
// The workload file of `weft bench --dataset FILE`: JSON Lines, one request per line, as
// bench/make_sharegpt_workload.py writes them:
//
//   {"input_len": 143, "output_len": 142}
//   {"prompt_ids": [1, 2, 3], "output_len": 8}
//
// `input_len` asks for that many seeded random prompt tokens; `prompt_ids` gives them. Blank
// lines are skipped. Any other line is refused with the file, the line number and the field.

#include <cstdint>
#include <string>
#include <vector>

#include "weft/error.hpp"

namespace weft::cli {

struct BenchRequestShape {
  int input_len = 0;  // used when prompt_ids is empty
  std::vector<std::int32_t> prompt_ids;
  int output_len = 0;
};

// Reads the whole file. Token ids must lie in [0, vocab_size); lengths in [1, 1 << 20].
Result<std::vector<BenchRequestShape>> read_bench_dataset(const std::string& path, int vocab_size);

}  // namespace weft::cli
