// Fuzzes the gateway's HTTP side on raw bytes: Beast's request parser with the gateway's body
// limit reads requests one after another from the input (keep-alive), and each complete POST
// to a completions route goes through the gateway's request parsing
// (actors/gateway_openai.cpp), as actors/gateway_server.cpp does on a socket.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/websocket/rfc6455.hpp>
#include <cstddef>
#include <cstdint>

#include "actors/gateway_openai.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace http = boost::beast::http;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (2 << 20)) return -1;
  static const weft::gateway::ServedModel model{
      "weft-tiny", 512, 2048, [](std::int32_t id) { return "t" + std::to_string(id); }};
  boost::asio::const_buffer rest(data, size);
  for (int i = 0; i < 16 && rest.size() > 0; ++i) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(1 << 20);
    parser.eager(true);
    boost::beast::error_code ec;
    while (rest.size() > 0 && !parser.is_done()) {
      const std::size_t used = parser.put(rest, ec);
      rest += used;
      if (ec == http::error::need_more) {
        ec = {};
        if (used == 0) break;
        continue;
      }
      if (ec) break;
    }
    if (!ec && !parser.is_done()) parser.put_eof(ec);
    if (ec || !parser.is_done()) return 0;
    auto req = parser.release();
    if (boost::beast::websocket::is_upgrade(req)) continue;
    const std::string_view target(req.target().data(), req.target().size());
    const std::string_view path = target.substr(0, target.find('?'));
    if (req.method() != http::verb::post) continue;
    weft::gateway::Api api;
    if (path == "/v1/completions") {
      api = weft::gateway::Api::kCompletions;
    } else if (path == "/v1/chat/completions") {
      api = weft::gateway::Api::kChat;
    } else {
      continue;
    }
    auto parsed = weft::gateway::parse_request(req.body(), api, model);
    (void)parsed;
  }
  return 0;
}
