#include "loaders/gguf_tokenizer.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "loaders/gguf_model.hpp"
#include "weft/log.hpp"

namespace weft {
namespace {

// token_type values of tokenizer.ggml.token_type (llama.cpp's llama_token_type).
constexpr int kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kByte = 6;

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20) {
          static constexpr char kHex[] = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 0xF];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

Error key_error(const gguf::File& file, const std::string& key, const std::string& what) {
  return Error(ErrorCode::kParse, file.source() + ": metadata \"" + key + "\" " + what);
}

// The pre-tokenizer regexes llama.cpp names in tokenizer.ggml.pre (those Weft knows).
const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

std::string split_then_byte_level(const char* regex) {
  std::string out = R"({"type":"Sequence","pretokenizers":[{"type":"Split","pattern":{"Regex":)";
  append_json_string(out, regex);
  out +=
      R"(},"behavior":"Isolated","invert":false},{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":false}]})";
  return out;
}

std::string byte_level_pre_tokenizer(const gguf::File& file, const std::string& pre) {
  if (pre == "llama-bpe" || pre == "llama3" || pre == "smaug-bpe" || pre == "dbrx") {
    return split_then_byte_level(kLlama3Regex);
  }
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return split_then_byte_level(kQwen2Regex);
  if (pre != "default" && pre != "gpt2" && pre != "gpt-2") {
    log_warn(file.source() + ": tokenizer.ggml.pre \"" + pre +
             "\" is not known to Weft; using GPT-2's pre-tokenizer regex");
  }
  return R"({"type":"ByteLevel","add_prefix_space":false,"trim_offsets":true,"use_regex":true})";
}

// A TemplateProcessing post-processor adding bos and/or eos around one sequence.
std::string special_post_processor(const std::vector<std::string>& tokens, std::optional<int> bos,
                                   std::optional<int> eos) {
  std::string single, specials;
  auto add_special = [&](int id) {
    const std::string& name = tokens[static_cast<std::size_t>(id)];
    if (!specials.empty()) specials += ',';
    append_json_string(specials, name);
    specials += R"(:{"id":)";
    append_json_string(specials, name);
    specials += R"(,"ids":[)" + std::to_string(id) + R"(],"tokens":[)";
    append_json_string(specials, name);
    specials += "]}";
    if (!single.empty()) single += ',';
    single += R"({"SpecialToken":{"id":)";
    append_json_string(single, name);
    single += R"(,"type_id":0}})";
  };
  if (bos) add_special(*bos);
  if (!single.empty()) single += ',';
  single += R"({"Sequence":{"id":"A","type_id":0}})";
  if (eos) add_special(*eos);
  // pair: the single template twice (tokenizers needs one; Weft encodes single sequences).
  return R"({"type":"TemplateProcessing","single":[)" + single + R"(],"pair":[)" + single +
         R"(],"special_tokens":{)" + specials + "}}";
}

}  // namespace

Result<std::string> gguf_tokenizer_json(const gguf::File& file) {
  auto kind = file.get_string("tokenizer.ggml.model");
  if (!kind) return kind.error();
  if (!kind->has_value()) {
    return Error(ErrorCode::kNotFound,
                 file.source() +
                     ": metadata \"tokenizer.ggml.model\" is missing (the file "
                     "carries no tokenizer)");
  }
  const std::string model = **kind;
  if (model != "gpt2" && model != "llama") {
    return Error(ErrorCode::kUnsupported, file.source() + ": tokenizer.ggml.model \"" + model +
                                              "\" is not supported (supported: gpt2, llama)");
  }
  const gguf::Value* tokens_value = file.find("tokenizer.ggml.tokens");
  if (tokens_value == nullptr || tokens_value->type != gguf::ValueType::kArray ||
      tokens_value->element_type != gguf::ValueType::kString || tokens_value->size == 0) {
    return Error(ErrorCode::kParse, file.source() +
                                        ": metadata \"tokenizer.ggml.tokens\" must be a "
                                        "non-empty array of strings");
  }
  const std::vector<std::string>& tokens = tokens_value->strings;
  const std::size_t n = tokens.size();
  auto numbers = [&](const char* key) -> Result<const std::vector<double>*> {
    const gguf::Value* v = file.find(key);
    if (v == nullptr) return static_cast<const std::vector<double>*>(nullptr);
    if (v->type != gguf::ValueType::kArray || v->element_type == gguf::ValueType::kString ||
        v->element_type == gguf::ValueType::kArray || v->size != n) {
      return key_error(file, key,
                       "must be an array of " + std::to_string(n) +
                           " numbers, one per token of tokenizer.ggml.tokens");
    }
    return &v->numbers;
  };
  auto types = numbers("tokenizer.ggml.token_type");
  if (!types) return types.error();
  // llama.cpp's token types: 0 undefined, 1 normal, 2 unknown, 3 control, 4 user-defined,
  // 5 unused, 6 byte. Anything else (a fraction, a negative, 4e9) is refused, naming the
  // token: a cast of such a double to int is undefined behaviour (found by fuzz_gguf).
  if (*types != nullptr) {
    for (std::size_t id = 0; id < n; ++id) {
      const double t = (**types)[id];
      if (!(t >= 0 && t <= 6) || t != static_cast<double>(static_cast<int>(t))) {
        std::ostringstream v;
        v << t;
        return key_error(
            file, "tokenizer.ggml.token_type",
            "holds " + v.str() + " for token " + std::to_string(id) + ", not a token type (0-6)");
      }
    }
  }
  auto scores = numbers("tokenizer.ggml.scores");
  if (!scores) return scores.error();
  auto type_of = [&](std::size_t id) {
    return *types != nullptr ? static_cast<int>((**types)[id]) : kNormal;
  };
  auto id_key = [&](const char* key) -> Result<std::optional<int>> {
    auto v = file.get_integer(key);
    if (!v) return v.error();
    if (!v->has_value()) return std::optional<int>();
    if (**v < 0 || static_cast<std::uint64_t>(**v) >= n) {
      return key_error(
          file, key,
          "is " + std::to_string(**v) + ", outside the " + std::to_string(n) + " tokens");
    }
    return std::optional<int>(static_cast<int>(**v));
  };
  auto bos = id_key("tokenizer.ggml.bos_token_id");
  if (!bos) return bos.error();
  auto eos = id_key("tokenizer.ggml.eos_token_id");
  if (!eos) return eos.error();
  auto unk = id_key("tokenizer.ggml.unknown_token_id");
  if (!unk) return unk.error();
  const bool spm = model == "llama";
  auto add_bos = file.get_bool("tokenizer.ggml.add_bos_token");
  if (!add_bos) return add_bos.error();
  auto add_eos = file.get_bool("tokenizer.ggml.add_eos_token");
  if (!add_eos) return add_eos.error();
  auto add_space = file.get_bool("tokenizer.ggml.add_space_prefix");
  if (!add_space) return add_space.error();

  std::string json = R"({"version":"1.0","truncation":null,"padding":null,"added_tokens":[)";
  bool first = true;
  for (std::size_t id = 0; id < n; ++id) {
    const int type = type_of(id);
    const bool special = type == kControl || type == kUnknown;
    if (!special && type != kUserDefined) continue;
    if (!first) json += ',';
    first = false;
    json += R"({"id":)" + std::to_string(id) + R"(,"content":)";
    append_json_string(json, tokens[id]);
    json += R"(,"single_word":false,"lstrip":false,"rstrip":false,"normalized":false,"special":)";
    json += special ? "true}" : "false}";
  }
  json += "],";
  if (spm) {
    json += R"("normalizer":{"type":"Sequence","normalizers":[)";
    if (add_space->value_or(true)) json += R"({"type":"Prepend","prepend":"▁"},)";
    json += R"({"type":"Replace","pattern":{"String":" "},"content":"▁"}]},)";
    json += R"("pre_tokenizer":null,)";
  } else {
    auto pre = file.get_string("tokenizer.ggml.pre");
    if (!pre) return pre.error();
    json += R"("normalizer":null,"pre_tokenizer":)" +
            byte_level_pre_tokenizer(file, pre->value_or("default")) + ",";
  }
  const bool bos_on = add_bos->value_or(spm) && bos->has_value();
  const bool eos_on = add_eos->value_or(false) && eos->has_value();
  json += R"("post_processor":)";
  if (bos_on || eos_on) {
    json +=
        special_post_processor(tokens, bos_on ? *bos : std::nullopt, eos_on ? *eos : std::nullopt);
  } else {
    json +=
        spm ? "null"
            : R"({"type":"ByteLevel","add_prefix_space":true,"trim_offsets":false,"use_regex":true})";
  }
  json += ",";
  if (spm) {
    json +=
        R"("decoder":{"type":"Sequence","decoders":[{"type":"Replace","pattern":{"String":"▁"},"content":" "},{"type":"ByteFallback"},{"type":"Fuse"})";
    if (add_space->value_or(true)) json += R"(,{"type":"Strip","content":" ","start":1,"stop":0})";
    json += "]},";
  } else {
    json +=
        R"("decoder":{"type":"ByteLevel","add_prefix_space":true,"trim_offsets":true,"use_regex":true},)";
  }
  json += R"("model":{"type":"BPE","dropout":null,"unk_token":)";
  if (unk->has_value()) {
    append_json_string(json, tokens[static_cast<std::size_t>(**unk)]);
  } else {
    json += "null";
  }
  json += R"(,"continuing_subword_prefix":null,"end_of_word_suffix":null,"fuse_unk":)";
  json += spm ? "true" : "false";
  json += R"(,"byte_fallback":)";
  json += spm ? "true" : "false";
  json += R"(,"ignore_merges":false,"vocab":{)";
  // A token spelled twice keeps its first id (the later one is unreachable by text).
  std::unordered_map<std::string_view, std::uint32_t> ids;
  ids.reserve(n);
  for (std::size_t id = 0; id < n; ++id)
    ids.emplace(tokens[id], static_cast<std::uint32_t>(id));
  first = true;
  for (std::size_t id = 0; id < n; ++id) {
    auto it = ids.find(tokens[id]);
    if (it->second != id) continue;
    if (!first) json += ',';
    first = false;
    append_json_string(json, tokens[id]);
    json += ':' + std::to_string(id);
  }
  json += R"(},"merges":[)";
  first = true;
  auto add_merge = [&](std::string_view left, std::string_view right) {
    if (!first) json += ',';
    first = false;
    json += '[';
    append_json_string(json, left);
    json += ',';
    append_json_string(json, right);
    json += ']';
  };
  if (spm) {
    if (*scores == nullptr) {
      return Error(ErrorCode::kNotFound, file.source() +
                                             ": metadata \"tokenizer.ggml.scores\" is missing; "
                                             "a llama (SentencePiece) tokenizer needs it");
    }
    // Every split of a normal token into two tokens is a merge, ranked by the merged token's
    // score (highest first), ties by the pieces' ids: SentencePiece's BPE merges the pair
    // whose result scores best.
    struct Merge {
      double score;
      std::uint32_t left, right;
    };
    std::vector<Merge> merges;
    for (std::size_t id = 0; id < n; ++id) {
      if (type_of(id) != kNormal && type_of(id) != kUserDefined) continue;
      const std::string& t = tokens[id];
      for (std::size_t k = 1; k < t.size(); ++k) {
        if ((static_cast<unsigned char>(t[k]) & 0xC0) == 0x80) continue;  // inside a character
        auto l = ids.find(std::string_view(t).substr(0, k));
        auto r = ids.find(std::string_view(t).substr(k));
        if (l == ids.end() || r == ids.end()) continue;
        if (type_of(l->second) == kByte || type_of(r->second) == kByte) continue;
        merges.push_back({(**scores)[id], l->second, r->second});
      }
    }
    std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
      if (a.score != b.score) return a.score > b.score;
      if (a.left != b.left) return a.left < b.left;
      return a.right < b.right;
    });
    for (const Merge& m : merges)
      add_merge(tokens[m.left], tokens[m.right]);
  } else {
    const gguf::Value* merges = file.find("tokenizer.ggml.merges");
    if (merges == nullptr || merges->type != gguf::ValueType::kArray ||
        merges->element_type != gguf::ValueType::kString) {
      return Error(ErrorCode::kParse, file.source() +
                                          ": metadata \"tokenizer.ggml.merges\" must be an "
                                          "array of strings for a gpt2 (BPE) tokenizer");
    }
    for (std::size_t i = 0; i < merges->strings.size(); ++i) {
      const std::string& m = merges->strings[i];
      const std::size_t space = m.find(' ', 1);
      if (space == std::string::npos) {
        return key_error(
            file, "tokenizer.ggml.merges",
            "entry " + std::to_string(i) + " \"" + m + "\" is not two tokens separated by a space");
      }
      add_merge(std::string_view(m).substr(0, space), std::string_view(m).substr(space + 1));
    }
  }
  json += "]}}";
  return json;
}

Result<loaders::LoadedTokenizer> load_gguf_tokenizer(const std::filesystem::path& path) {
  auto file = gguf::File::open(path);
  if (!file) return file.error();
  auto json = gguf_tokenizer_json(**file);
  if (!json) return json.error();
  auto tokenizer = loaders::parse_tokenizer_json(*json, path.string() + " (tokenizer metadata)");
  if (!tokenizer) return tokenizer.error();
  loaders::LoadedTokenizer out;
  out.tokenizer = std::move(tokenizer.value());
  out.tokenizer_json = path;
  auto name_of = [&](const char* key, std::optional<std::string>& name,
                     std::optional<std::uint32_t>& id) {
    auto v = (*file)->get_integer(key);
    if (!v || !v->has_value() || **v < 0) return;
    const auto token = static_cast<std::uint32_t>(**v);
    if (const std::string* text = out.tokenizer->id_to_token(token)) {
      name = *text;
      id = token;
    }
  };
  name_of("tokenizer.ggml.bos_token_id", out.special.bos, out.special.bos_id);
  name_of("tokenizer.ggml.eos_token_id", out.special.eos, out.special.eos_id);
  name_of("tokenizer.ggml.padding_token_id", out.special.pad, out.special.pad_id);
  name_of("tokenizer.ggml.unknown_token_id", out.special.unk, out.special.unk_id);
  return out;
}

Result<ChatTemplateFile> read_gguf_chat_template(const std::filesystem::path& path) {
  auto file = gguf::File::open(path);
  if (!file) return file.error();
  ChatTemplateFile out;
  out.path = path;
  const std::string prefix = "tokenizer.chat_template";
  for (const auto& [key, value] : (*file)->metadata()) {
    if (key.compare(0, prefix.size(), prefix) != 0 || value.type != gguf::ValueType::kString) {
      continue;
    }
    if (key == prefix) {
      out.templates.insert(out.templates.begin(), {"default", value.string});
    } else if (key.size() > prefix.size() + 1 && key[prefix.size()] == '.') {
      out.templates.emplace_back(key.substr(prefix.size() + 1), value.string);
    }
  }
  if (out.templates.empty()) {
    return Error(ErrorCode::kNotFound,
                 path.string() + ": no chat template (metadata \"tokenizer.chat_template\")");
  }
  const gguf::Value* tokens = (*file)->find("tokenizer.ggml.tokens");
  for (auto [key, var] : {std::pair{"tokenizer.ggml.bos_token_id", "bos_token"},
                          std::pair{"tokenizer.ggml.eos_token_id", "eos_token"},
                          std::pair{"tokenizer.ggml.padding_token_id", "pad_token"},
                          std::pair{"tokenizer.ggml.unknown_token_id", "unk_token"}}) {
    auto id = (*file)->get_integer(key);
    if (!id || !id->has_value() || tokens == nullptr || **id < 0 ||
        static_cast<std::size_t>(**id) >= tokens->strings.size()) {
      continue;
    }
    out.special_tokens.set(var, jinja::Value(tokens->strings[static_cast<std::size_t>(**id)]));
  }
  return out;
}

Result<std::string> read_tokenizer_json_text(const std::filesystem::path& model) {
  if (is_gguf_file(model)) {
    auto file = gguf::File::open(model);
    if (!file) return file.error();
    return gguf_tokenizer_json(**file);
  }
  const auto path = std::filesystem::is_directory(model) ? model / "tokenizer.json" : model;
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(ErrorCode::kNotFound, path.string() + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace weft
