// Fuzzes the gateway's request parsing (actors/gateway_openai.cpp): a body of
// /v1/completions, /v1/chat/completions or a WebSocket generate frame (the first byte picks
// which) becomes a GenerateRequest with every parameter checked.
#include <cstddef>
#include <cstdint>

#include "actors/gateway_openai.hpp"
#include "tests/fuzz/fuzz_util.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1 || size > (1 << 20)) return -1;
  static const weft::gateway::ServedModel model{
      "weft-tiny", 512, 2048, [](std::int32_t id) { return "t" + std::to_string(id); }};
  const auto api = static_cast<weft::gateway::Api>(data[0] % 3);
  auto parsed = weft::gateway::parse_request(weft::fuzz::as_text(data + 1, size - 1), api, model);
  if (!parsed) (void)weft::gateway::error_param(parsed.error());
  return 0;
}
