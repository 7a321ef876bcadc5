#include "actors/gateway_embeddings.hpp"

#include <bit>
#include <boost/json.hpp>
#include <charconv>
#include <cmath>
#include <cstring>

namespace weft::gateway {
namespace {

namespace json = boost::json;

Error bad(std::string_view param, const std::string& what) {
  return Error(ErrorCode::kInvalidArgument, std::string(param) + ": " + what);
}

Result<std::vector<std::int32_t>> token_array(const json::array& a, const std::string& at,
                                              const ServedModel& model) {
  std::vector<std::int32_t> ids;
  ids.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const auto& v = a[i];
    if (!v.is_int64() && !v.is_uint64()) {
      return bad(at + "[" + std::to_string(i) + "]",
                 "expected a token id (an integer), got " + json::serialize(v));
    }
    const auto id = v.is_int64() ? v.get_int64() : static_cast<std::int64_t>(v.get_uint64());
    if (id < 0 || id >= model.vocab_size) {
      return bad(at + "[" + std::to_string(i) + "]", "token id " + std::to_string(id) +
                                                         " is outside the vocabulary [0, " +
                                                         std::to_string(model.vocab_size) + ")");
    }
    ids.push_back(static_cast<std::int32_t>(id));
  }
  if (ids.empty()) return bad(at, "an empty array of token ids");
  return ids;
}

Result<void> parse_input(const json::value& v, EmbedRequest& r, const ServedModel& model) {
  if (v.is_string()) {
    if (v.get_string().empty()) return bad("input", "must not be an empty string");
    r.texts.emplace_back(v.get_string());
    return {};
  }
  if (!v.is_array() || v.get_array().empty()) {
    return bad("input",
               "expected a string, an array of strings, an array of token ids or an array of "
               "token id arrays (non-empty)");
  }
  const auto& a = v.get_array();
  if (a[0].is_int64() || a[0].is_uint64()) {
    auto ids = token_array(a, "input", model);
    if (!ids) return ids.error();
    r.token_ids.push_back(std::move(*ids));
    return {};
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    const std::string at = "input[" + std::to_string(i) + "]";
    if (a[i].is_string()) {
      if (!r.token_ids.empty()) return bad(at, "mixes strings with token id arrays");
      if (a[i].get_string().empty()) return bad(at, "must not be an empty string");
      r.texts.emplace_back(a[i].get_string());
    } else if (a[i].is_array()) {
      if (!r.texts.empty()) return bad(at, "mixes token id arrays with strings");
      auto ids = token_array(a[i].get_array(), at, model);
      if (!ids) return ids.error();
      r.token_ids.push_back(std::move(*ids));
    } else {
      return bad(at, "expected a string or an array of token ids, got " + json::serialize(a[i]));
    }
  }
  return {};
}

void append_float(std::string& out, float f) {
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, f);
  out.append(buffer, end);
}

}  // namespace

Result<ParsedEmbeddings> parse_embeddings_request(std::string_view body, const ServedModel& model,
                                                  int embedding_size) {
  json::error_code ec;
  json::value root = json::parse(body, ec);
  if (ec) return Error(ErrorCode::kParse, "the body is not valid JSON: " + ec.message());
  if (!root.is_object()) return Error(ErrorCode::kParse, "the body is not a JSON object");
  ParsedEmbeddings out;
  bool have_input = false;
  for (const auto& [k, v] : root.get_object()) {
    const std::string_view key(k.data(), k.size());
    if (key == "input") {
      if (auto ok = parse_input(v, out.request, model); !ok) return ok.error();
      have_input = true;
    } else if (key == "model") {
      if (!v.is_string()) return bad(key, "expected a string");
      if (v.get_string() != model.name) {
        return Error(ErrorCode::kNotFound, "model: \"" + std::string(v.get_string()) +
                                               "\" is not served here; this server has \"" +
                                               model.name + "\"");
      }
    } else if (key == "encoding_format") {
      if (v.is_null()) continue;
      if (!v.is_string() || (v.get_string() != "float" && v.get_string() != "base64")) {
        return bad(key, "expected \"float\" or \"base64\", got " + json::serialize(v));
      }
      out.base64 = v.get_string() == "base64";
    } else if (key == "dimensions") {
      if (v.is_null()) continue;
      if (!v.is_int64() || v.get_int64() < 1 || v.get_int64() > embedding_size) {
        return bad(key, json::serialize(v) + " is outside [1, " + std::to_string(embedding_size) +
                            "] (the model's embeddings have " + std::to_string(embedding_size) +
                            " numbers)");
      }
      out.dimensions = static_cast<int>(v.get_int64());
    } else if (key == "user") {
      if (!v.is_string() && !v.is_null()) return bad(key, "expected a string");
    } else if (key == "pooling") {
      if (!v.is_string() || (v.get_string() != "mean" && v.get_string() != "cls")) {
        return bad(key, "expected \"mean\" or \"cls\", got " + json::serialize(v));
      }
      out.request.pooling =
          v.get_string() == "cls" ? EmbeddingPooling::kCls : EmbeddingPooling::kMean;
    } else if (key == "normalize") {
      if (!v.is_bool()) return bad(key, "expected a boolean, got " + json::serialize(v));
      out.request.normalize = v.get_bool();
    } else if (key == "truncate") {
      if (v.is_null()) continue;
      if (!v.is_bool()) return bad(key, "expected a boolean, got " + json::serialize(v));
      out.request.truncate = v.get_bool();
    } else {
      return bad(key, "unknown or unsupported parameter");
    }
  }
  if (!have_input) return bad("input", "required");
  return out;
}

std::string embeddings_response_json(const EmbedResult& result, const ParsedEmbeddings& parsed,
                                     const ServedModel& model) {
  std::string out = "{\"object\":\"list\",\"data\":[";
  for (std::size_t i = 0; i < result.embeddings.size(); ++i) {
    std::vector<float> v = result.embeddings[i];
    if (parsed.dimensions && static_cast<std::size_t>(*parsed.dimensions) < v.size()) {
      // Shortened as OpenAI's text-embedding-3 does: the leading numbers, re-normalized when
      // the full vector was unit length.
      double full = 0, kept = 0;
      for (std::size_t j = 0; j < v.size(); ++j) {
        full += static_cast<double>(v[j]) * v[j];
        if (j < static_cast<std::size_t>(*parsed.dimensions))
          kept += static_cast<double>(v[j]) * v[j];
      }
      v.resize(static_cast<std::size_t>(*parsed.dimensions));
      if (std::abs(full - 1.0) < 1e-3 && kept > 0) {
        const double scale = 1.0 / std::sqrt(kept);
        for (float& f : v)
          f = static_cast<float>(f * scale);
      }
    }
    if (i) out.push_back(',');
    out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
    if (parsed.base64) {
      std::string bytes(v.size() * sizeof(float), '\0');
      for (std::size_t j = 0; j < v.size(); ++j) {
        auto bits = std::bit_cast<std::uint32_t>(v[j]);
        for (int b = 0; b < 4; ++b)
          bytes[j * 4 + static_cast<std::size_t>(b)] = static_cast<char>((bits >> (8 * b)) & 0xff);
      }
      out += "\"" + base64_encode(bytes) + "\"";
    } else {
      out.push_back('[');
      for (std::size_t j = 0; j < v.size(); ++j) {
        if (j) out.push_back(',');
        append_float(out, v[j]);
      }
      out.push_back(']');
    }
    out.push_back('}');
  }
  out += "],\"model\":" + json::serialize(json::value(model.name)) +
         ",\"usage\":{\"prompt_tokens\":" + std::to_string(result.prompt_tokens) +
         ",\"total_tokens\":" + std::to_string(result.prompt_tokens) + "}}\n";
  return out;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const auto n = (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16) |
                   (static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8) |
                   static_cast<unsigned char>(bytes[i + 2]);
    for (int s = 18; s >= 0; s -= 6)
      out.push_back(kAlphabet[(n >> s) & 63]);
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    std::uint32_t n = static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i])) << 16;
    if (rest == 2) n |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[i + 1])) << 8;
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(rest == 2 ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace weft::gateway
