#pragma once
// POST /v1/embeddings (docs/http-api.md#embeddings): OpenAI's request body into an
// EmbedRequest, and an EmbedResult into OpenAI's response. Plain functions without I/O.

#include <optional>
#include <string>
#include <string_view>

#include "actors/gateway_openai.hpp"
#include "weft/engine.hpp"
#include "weft/error.hpp"

namespace weft::gateway {

struct ParsedEmbeddings {
  EmbedRequest request;
  bool base64 = false;            // encoding_format "base64": little-endian float32 bytes
  std::optional<int> dimensions;  // keep the first N numbers (re-normalized if normalized)
};

// Parses and checks `body`: `input` (a string, an array of strings, an array of token ids or
// an array of such arrays), `model`, `encoding_format` (float or base64), `dimensions` (1 to
// `embedding_size`), `user`, and Weft's `pooling` (mean or cls), `normalize` and `truncate`
// (booleans).
// Errors start with the parameter's name and a colon, as parse_request's do.
Result<ParsedEmbeddings> parse_embeddings_request(std::string_view body, const ServedModel& model,
                                                  int embedding_size);

// {"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
// "usage": {"prompt_tokens", "total_tokens"}}.
std::string embeddings_response_json(const EmbedResult& result, const ParsedEmbeddings& parsed,
                                     const ServedModel& model);

// RFC 4648 base64 of `bytes` (with padding).
std::string base64_encode(std::string_view bytes);

}  // namespace weft::gateway
