#pragma once
// The model-zoo fixtures made by tests/fixtures/zoo/make_fixtures.py on the GPU machine: a tiny
// random-weight transformers checkpoint per family plus reference.json (the prompt's logits,
// a 16-token greedy continuation and the logits each token was chosen from).

#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/runtime/model/reference_fixture.hpp"

namespace weft::testing::zoo {

// Absolute logit tolerance (fp32 weights and arithmetic on both sides), and the top-2 margin
// under which a greedy step is a near-tie that the tolerance could flip.
inline constexpr double kLogitTolerance = 2e-3;
inline constexpr double kNearTie = 2 * kLogitTolerance;

inline const char* kMakeCommand =
    "PYTHONUNBUFFERED=1 python3 tests/fixtures/zoo/make_fixtures.py --out tests/fixtures/zoo";

inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> names{"gpt2", "opt",   "opt_post_norm", "gemma",
                                              "phi3", "bloom", "falcon",        "falcon_mqa_bias"};
  return names;
}

inline std::filesystem::path fixture_dir(const std::string& name) {
  return source_dir() / "tests" / "fixtures" / "zoo" / name;
}

struct ZooReference {
  std::vector<int> prompt_ids;
  std::vector<std::vector<float>> prompt_logits;  // [prompt_len][vocab]
  std::vector<int> greedy_ids;
  std::vector<double> greedy_margins;
  std::vector<std::vector<float>> step_logits;  // [greedy_len][vocab]
};

inline ZooReference read_zoo_reference(const std::filesystem::path& dir) {
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.load((dir / "reference.json").string());
  ZooReference r;
  auto ints = [](simdjson::dom::array a, std::vector<int>& out) {
    for (auto v : a)
      out.push_back(static_cast<int>(v.get_int64()));
  };
  auto rows = [](simdjson::dom::array a, std::vector<std::vector<float>>& out) {
    for (auto row : a) {
      std::vector<float> values;
      for (auto v : row.get_array())
        values.push_back(static_cast<float>(v.get_double()));
      out.push_back(std::move(values));
    }
  };
  ints(root["prompt_ids"].get_array(), r.prompt_ids);
  ints(root["greedy_ids"].get_array(), r.greedy_ids);
  for (auto v : root["greedy_margins"].get_array())
    r.greedy_margins.push_back(v.get_double());
  rows(root["prompt_logits"].get_array(), r.prompt_logits);
  rows(root["step_logits"].get_array(), r.step_logits);
  return r;
}

// The largest |got - want| over a row.
inline double max_abs_error(const float* got, const std::vector<float>& want) {
  double err = 0;
  for (std::size_t i = 0; i < want.size(); ++i)
    err = std::max(err, std::fabs(static_cast<double>(got[i]) - want[i]));
  return err;
}

// Greedy steps to compare: every step up to (not including) the first near-tie.
inline std::size_t steps_before_near_tie(const ZooReference& r) {
  std::size_t k = 0;
  while (k < r.greedy_margins.size() && r.greedy_margins[k] > kNearTie)
    ++k;
  return k;
}

}  // namespace weft::testing::zoo
