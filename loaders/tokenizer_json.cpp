#include "loaders/tokenizer_json.hpp"

#include <simdjson.h>

#include <fstream>
#include <sstream>

#include "loaders/gguf_model.hpp"
#include "loaders/gguf_tokenizer.hpp"
#include "loaders/tokenizer_json_components.hpp"

namespace weft::loaders {
namespace {

Result<simdjson::padded_string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return Error(
        std::filesystem::exists(path) ? ErrorCode::kIo : ErrorCode::kNotFound,
        path.string() + ": cannot open the file (" +
            (std::filesystem::exists(path) ? "permission denied or not a file" : "no such file") +
            ")");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return simdjson::padded_string(buffer.str());
}

std::optional<std::string> token_name(simdjson::ondemand::value value) {
  std::string_view s;
  if (value.get_string().get(s) == simdjson::SUCCESS) return std::string(s);
  simdjson::ondemand::object object;
  if (value.get_object().get(object) == simdjson::SUCCESS &&
      object["content"].get_string().get(s) == simdjson::SUCCESS) {
    return std::string(s);
  }
  return std::nullopt;
}

// Fills the names still unset from a tokenizer_config.json or special_tokens_map.json.
Result<void> read_special_names(const std::filesystem::path& path, SpecialTokenNames& names) {
  if (!std::filesystem::exists(path)) return {};
  auto text = read_file(path);
  if (!text) return text.error();
  // On-demand parsing: these files hold numbers beyond 64 bits (model_max_length = 1e30) that
  // the DOM parser rejects, and only four string fields matter here.
  simdjson::ondemand::parser parser;
  simdjson::ondemand::document doc;
  simdjson::ondemand::object object;
  if (auto error = parser.iterate(*text).get(doc); error || doc.get_object().get(object)) {
    return Error(ErrorCode::kParse,
                 path.string() + ": malformed JSON (" +
                     simdjson::error_message(error ? error : simdjson::TAPE_ERROR) +
                     "); expected an object");
  }
  for (auto field : object) {
    std::string_view key;
    simdjson::ondemand::value value;
    if (auto error = field.unescaped_key().get(key); error || field.value().get(value)) {
      return Error(ErrorCode::kParse,
                   path.string() + ": malformed JSON (" +
                       simdjson::error_message(error ? error : simdjson::TAPE_ERROR) + ")");
    }
    std::optional<std::string>* slot = key == "bos_token"   ? &names.bos
                                       : key == "eos_token" ? &names.eos
                                       : key == "pad_token" ? &names.pad
                                       : key == "unk_token" ? &names.unk
                                                            : nullptr;
    if (slot != nullptr && !slot->has_value()) *slot = token_name(value);
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<text::Tokenizer>> parse_tokenizer_json(std::string_view json,
                                                              const std::string& source) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  simdjson::padded_string padded(json);
  if (auto error = parser.parse(padded).get(doc); error) {
    return Error(ErrorCode::kParse, source + ": malformed JSON (" + simdjson::error_message(error) +
                                        "); expected a tokenizers tokenizer.json");
  }
  try {
    return build_tokenizer(JsonNode{doc, source, ""});
  } catch (const Error& e) {
    return e;
  }
}

Result<LoadedTokenizer> load_tokenizer(const std::filesystem::path& path) {
  if (is_gguf_file(path)) return load_gguf_tokenizer(path);
  std::error_code ec;
  const std::filesystem::path file =
      std::filesystem::is_directory(path, ec) ? path / "tokenizer.json" : path;
  auto text = read_file(file);
  if (!text) return text.error();
  auto tokenizer =
      parse_tokenizer_json(std::string_view(text->data(), text->size()), file.string());
  if (!tokenizer) return tokenizer.error();
  LoadedTokenizer loaded;
  loaded.tokenizer_json = file;
  const auto folder = file.parent_path();
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    if (auto r = read_special_names(folder / name, loaded.special); !r) return r.error();
  }
  const auto& tok = **tokenizer;
  const auto id_of = [&](const std::optional<std::string>& name) -> std::optional<std::uint32_t> {
    return name ? tok.token_to_id(*name) : std::nullopt;
  };
  loaded.special.bos_id = id_of(loaded.special.bos);
  loaded.special.eos_id = id_of(loaded.special.eos);
  loaded.special.pad_id = id_of(loaded.special.pad);
  loaded.special.unk_id = id_of(loaded.special.unk);
  loaded.tokenizer = std::move(*tokenizer);
  return loaded;
}

}  // namespace weft::loaders
