#pragma once
// The WebSocket session of the gateway (docs/websocket.md): many generate requests multiplexed
// on one connection, each streaming token frames and then a done frame; embeddings requests,
// each answered by one frame (the HTTP route's object); cancel frames; error
// frames for bad input, and a close after repeated protocol violations. Included only by the
// gateway's own .cpp files, since it brings in Beast.

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <memory>

#include "actors/gateway_server.hpp"

namespace weft::gateway {

// Accepts the upgrade `request` read from `stream` and serves the connection until it closes;
// on the way out, every request it still has live is cancelled.
boost::asio::awaitable<void> run_websocket_session(
    std::shared_ptr<GatewayState> state, boost::beast::tcp_stream stream,
    boost::beast::http::request<boost::beast::http::string_body> request);

}  // namespace weft::gateway
