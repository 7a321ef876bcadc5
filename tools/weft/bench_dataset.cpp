#include "tools/weft/bench_dataset.hpp"

#include <fstream>
#include <sstream>

#include "tools/weft/json_lines.hpp"

namespace weft::cli {
namespace {

constexpr std::int64_t kMaxLen = 1 << 20;

}  // namespace

Result<std::vector<BenchRequestShape>> read_bench_dataset(const std::string& path, int vocab_size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(ErrorCode::kNotFound, path + ": cannot be read");
  std::vector<BenchRequestShape> out;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    auto where = [&] { return path + ":" + std::to_string(number) + ": "; };
    auto value = parse_json_line(line, "one JSON object per line");
    if (!value) return Error(ErrorCode::kParse, where() + value.error().what());
    const auto* object = value->if_object();
    if (object == nullptr)
      return Error(ErrorCode::kInvalidArgument, where() + "a line must be a JSON object");
    for (const auto& field : *object) {
      const std::string_view key = field.key();
      if (key != "input_len" && key != "output_len" && key != "prompt_ids")
        return Error(ErrorCode::kInvalidArgument,
                     where() + "unknown field \"" + std::string(key) +
                         "\" (expected input_len or prompt_ids, and output_len)");
    }
    auto length = [&](const char* key) -> Result<int> {
      const auto* v = object->if_contains(key);
      if (v == nullptr) return Error(ErrorCode::kInvalidArgument, where() + key + " is missing");
      if (!v->is_int64() || v->as_int64() < 1 || v->as_int64() > kMaxLen)
        return Error(ErrorCode::kInvalidArgument, where() + key + " must be an integer in [1, " +
                                                      std::to_string(kMaxLen) + "], not " +
                                                      boost::json::serialize(*v));
      return static_cast<int>(v->as_int64());
    };
    BenchRequestShape shape;
    auto output = length("output_len");
    if (!output) return output.error();
    shape.output_len = *output;
    const bool has_ids = object->contains("prompt_ids");
    if (has_ids == object->contains("input_len"))
      return Error(ErrorCode::kInvalidArgument,
                   where() + "give exactly one of input_len and prompt_ids");
    if (has_ids) {
      const auto* ids = object->at("prompt_ids").if_array();
      if (ids == nullptr || ids->empty() || static_cast<std::int64_t>(ids->size()) > kMaxLen)
        return Error(ErrorCode::kInvalidArgument,
                     where() + "prompt_ids must be a non-empty array of token ids");
      for (std::size_t i = 0; i < ids->size(); ++i) {
        const auto& id = (*ids)[i];
        if (!id.is_int64() || id.as_int64() < 0 || id.as_int64() >= vocab_size)
          return Error(ErrorCode::kInvalidArgument, where() + "prompt_ids[" + std::to_string(i) +
                                                        "] = " + boost::json::serialize(id) +
                                                        " is not a token id in [0, " +
                                                        std::to_string(vocab_size) + ")");
        shape.prompt_ids.push_back(static_cast<std::int32_t>(id.as_int64()));
      }
      shape.input_len = static_cast<int>(shape.prompt_ids.size());
    } else {
      auto input = length("input_len");
      if (!input) return input.error();
      shape.input_len = *input;
    }
    out.push_back(std::move(shape));
  }
  if (out.empty()) return Error(ErrorCode::kInvalidArgument, path + ": holds no requests");
  return out;
}

}  // namespace weft::cli
