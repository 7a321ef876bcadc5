#include "loaders/quantization_config.hpp"

#include <simdjson.h>

#include <string>

#include "loaders/mapped_file.hpp"

namespace weft {

Result<quant::QuantType> read_weight_quantization(const std::filesystem::path& config_json) {
  auto file = MappedFile::open(config_json);
  if (!file) return file.error();
  simdjson::dom::parser parser;
  simdjson::padded_string padded(file->text());
  simdjson::dom::element root;
  if (auto err = parser.parse(padded).get(root)) {
    return Error(ErrorCode::kParse,
                 config_json.string() + ": not valid JSON (" + simdjson::error_message(err) + ")");
  }
  simdjson::dom::element entry;
  if (root.at_key("quantization").get(entry) != simdjson::SUCCESS) return quant::QuantType::kNone;
  std::string_view format;
  if (!entry.is_object() || entry.at_key("format").get(format) != simdjson::SUCCESS) {
    return Error(ErrorCode::kParse, config_json.string() +
                                        ": \"quantization\" must be an object with a string "
                                        "\"format\" (e.g. {\"format\": \"q4_b32\"})");
  }
  auto type = quant::parse_quant_type(format);
  if (!type) {
    return Error(ErrorCode::kUnsupported,
                 config_json.string() + ": \"quantization.format\": " + type.error().what());
  }
  return type.value();
}

}  // namespace weft
