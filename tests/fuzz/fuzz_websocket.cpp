// Fuzzes the gateway's WebSocket side on raw bytes: after the upgrade, the input is what the
// client sends (frames, masked as clients must). Beast's server stream decodes the frames with
// the gateway's message limit; each whole text message is handled as
// actors/gateway_websocket.cpp handles a frame: JSON object with "type" and "id", and a
// generate frame's request goes through the gateway's request parsing.
#include <boost/asio/error.hpp>  // before the test stream, whose .ipp uses it
#include <boost/beast/_experimental/test/stream.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/websocket/stream.hpp>
#include <boost/json.hpp>
#include <cstddef>
#include <cstdint>

#include "actors/gateway_openai.hpp"
#include "tests/fuzz/fuzz_util.hpp"

namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;

namespace {

void on_frame(const std::string& text) {
  static const weft::gateway::ServedModel model{
      "weft-tiny", 512, 2048, [](std::int32_t id) { return "t" + std::to_string(id); }};
  json::error_code ec;
  json::value frame = json::parse(text, ec);
  if (ec || !frame.is_object()) return;
  const json::object& object = frame.get_object();
  const json::value* type = object.if_contains("type");
  const json::value* id = object.if_contains("id");
  if (!type || !type->is_string() || !id) return;
  (void)json::serialize(*id);
  if (type->get_string() != "generate") return;
  auto parsed = weft::gateway::parse_request(object, weft::gateway::Api::kWebSocket, model);
  (void)parsed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > (2 << 20)) return -1;
  static boost::asio::io_context ioc;
  beast::test::stream client(ioc);
  websocket::stream<beast::test::stream> ws(ioc);
  ws.next_layer().connect(client);
  ws.next_layer().append(
      "GET /ws HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
  beast::error_code ec;
  ws.accept(ec);
  if (ec) return 0;
  ws.next_layer().append(std::string_view(reinterpret_cast<const char*>(data), size));
  ws.read_message_max(1 << 20);
  ws.next_layer().close_remote();
  beast::flat_buffer buffer;
  for (int i = 0; i < 64; ++i) {
    ws.read(buffer, ec);
    if (ec) break;
    if (ws.got_text()) on_frame(beast::buffers_to_string(buffer.data()));
    buffer.consume(buffer.size());
  }
  return 0;
}
