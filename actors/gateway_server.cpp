#include "actors/gateway_server.hpp"

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <chrono>

#include "actors/gateway_embeddings.hpp"
#include "actors/gateway_metrics.hpp"
#include "actors/gateway_websocket.hpp"

namespace weft::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Request = http::request<http::string_body>;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

struct Reply {
  http::status status = http::status::ok;
  std::string body;
  std::string content_type = "application/json";
  std::string allow;      // for 405
  int retry_after_s = 0;  // for 429 and 503: the Retry-After header when > 0
  bool close = false;     // Connection: close whatever the client asked (draining)
};

Reply error_reply(http::status status, std::string_view message, std::string_view type,
                  std::string_view param = {}, std::string_view code = {}) {
  return Reply{status, error_json(message, type, param, code) + "\n"};
}

// An engine or parse error as OpenAI's error JSON with the status that fits it.
Reply reply_for(const Error& error) {
  switch (error.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kParse:
    case ErrorCode::kOutOfRange:
    case ErrorCode::kUnsupported:
      return error_reply(http::status::bad_request, error.what(), "invalid_request_error",
                         error_param(error), "invalid_parameter");
    case ErrorCode::kNotFound:
      return error_reply(http::status::not_found, error.what(), "invalid_request_error",
                         error_param(error), "model_not_found");
    case ErrorCode::kResourceExhausted:
    case ErrorCode::kShutdown: {
      Reply r = error_reply(http::status::service_unavailable, error.what(), "server_error", {},
                            "overloaded");
      // A request the pool can never hold will not fit later either; shutdown passes.
      if (error.code() == ErrorCode::kShutdown) r.retry_after_s = 1;
      return r;
    }
    default:
      return error_reply(http::status::internal_server_error, error.what(), "server_error");
  }
}

// The answer to a refused generation (refusal_for_new_generation), with Retry-After.
Reply refusal_reply(Refusal why, const GatewayState& state) {
  Reply r;
  switch (why) {
    case Refusal::kDraining:
      r = error_reply(http::status::service_unavailable,
                      "the server is shutting down and takes no new requests", "server_error", {},
                      "shutting_down");
      r.close = true;
      break;
    case Refusal::kTooManyQueued:
      r = error_reply(
          http::status::too_many_requests,
          "too many requests are queued: " + std::to_string(state.config.max_queued_requests) +
              " wait for their first token; retry later",
          "server_error", {}, "rate_limit_exceeded");
      break;
    default:
      r = error_reply(
          http::status::service_unavailable,
          "the server is overloaded: " + std::to_string(state.config.max_live_requests) +
              " requests are in flight; retry later",
          "server_error", {}, "overloaded");
  }
  r.retry_after_s = state.config.retry_after_s;
  return r;
}

Error as_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const Error& error) {
    return error;
  } catch (const std::exception& ex) {
    return Error(ErrorCode::kInternal, ex.what());
  }
}

// By reference: GCC 12 destroyed a by-value aggregate parameter of this coroutine twice
// (free(): invalid pointer) when callers passed a temporary.
asio::awaitable<bool> write_reply(beast::tcp_stream& stream, const Request& req, const Reply& reply,
                                  bool keep_alive) {
  http::response<http::string_body> res{reply.status, req.version()};
  res.set(http::field::server, "weft");
  res.set(http::field::content_type, reply.content_type);
  if (!reply.allow.empty()) res.set(http::field::allow, reply.allow);
  if (reply.retry_after_s > 0)
    res.set(http::field::retry_after, std::to_string(reply.retry_after_s));
  if (reply.close) keep_alive = false;
  res.keep_alive(keep_alive);
  res.body() = reply.body;
  res.prepare_payload();
  auto [ec, n] = co_await http::async_write(stream, res, kTuple);
  co_return !ec && keep_alive;
}

std::string models_json(const ServedModel& model) {
  namespace json = boost::json;
  json::object entry{{"id", model.name},
                     {"object", "model"},
                     {"created", unix_seconds()},
                     {"owned_by", "weft"},
                     {"max_model_len", model.context_length}};
  return json::serialize(json::object{{"object", "list"}, {"data", json::array{entry}}}) + "\n";
}

bool is_json_content_type(std::string_view type) {
  const std::string_view media = type.substr(0, type.find(';'));
  std::string lower;
  for (char c : media) {
    if (c != ' ' && c != '\t')
      lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return lower == "application/json";
}

// Streams a request's events as server-sent events. A failed write means the client left:
// its request is cancelled at once so that its KV pages go back to the pool.
asio::awaitable<bool> stream_events(beast::tcp_stream& stream, const Request& req,
                                    GatewayState& state, std::shared_ptr<RequestStream> events,
                                    ChunkWriter& writer, int samples, bool keep_alive,
                                    QueuedSlot& queued) {
  http::response<http::empty_body> res{http::status::ok, req.version()};
  res.set(http::field::server, "weft");
  res.set(http::field::content_type, "text/event-stream");
  res.set(http::field::cache_control, "no-cache");
  res.keep_alive(keep_alive);
  res.chunked(true);
  http::response_serializer<http::empty_body> serializer{res};
  auto [hec, hn] = co_await http::async_write_header(stream, serializer, kTuple);
  if (hec) {
    state.engine.cancel(events->id());
    co_return false;
  }
  TokenTimer timer(state);
  for (int finals = 0; finals < samples;) {
    auto [e, event] = co_await events->next(kTuple);
    queued.release();
    if (!e) timer.on_event(event);
    std::string lines;
    if (e) {
      lines = "data: " + error_json(as_error(e).what(), "server_error", {}, {}) + "\n\n";
      finals = samples;
    } else {
      if (event.kind == Event::Kind::kFinal) ++finals;
      if (event.kind == Event::Kind::kFinal && event.finish_reason == FinishReason::kError) {
        lines = "data: " + error_json(event.error, "server_error", {}, {}) + "\n\n";
      } else {
        lines = writer.on_event(event);
      }
    }
    if (finals == samples) lines += writer.finish();
    if (lines.empty()) continue;
    if (state.config.send_timeout_s > 0) {
      stream.expires_after(std::chrono::seconds(state.config.send_timeout_s));
    }
    auto [wec, wn] =
        co_await asio::async_write(stream, http::make_chunk(asio::buffer(lines)), kTuple);
    stream.expires_never();
    if (wec) {
      if (wec == beast::error::timeout) ++state.send_timeouts;
      state.engine.cancel(events->id());
      co_return false;
    }
  }
  auto [lec, ln] = co_await asio::async_write(stream, http::make_chunk_last(), kTuple);
  co_return !lec && keep_alive;
}

asio::awaitable<bool> serve_generation(beast::tcp_stream& stream, const Request& req,
                                       GatewayState& state, Api api, bool keep_alive) {
  ++state.live_generations;
  struct Done {
    GatewayState& state;
    ~Done() { --state.live_generations; }
  } done{state};
  if (const Refusal why = refusal_for_new_generation(state); why != Refusal::kNone) {
    Reply reply = refusal_reply(why, state);
    co_return co_await write_reply(stream, req, reply, keep_alive);
  }
  auto parsed = parse_request(req.body(), api, state.model);
  if (!parsed) {
    Reply reply = reply_for(parsed.error());
    co_return co_await write_reply(stream, req, reply, keep_alive);
  }
  const int samples = parsed->generate.sampling.n;
  const bool streaming = parsed->stream;
  const bool include_usage = parsed->include_usage;
  const bool logprobs = parsed->logprobs;
  const auto tool_calls = parsed->tool_calls;
  QueuedSlot queued(state);
  auto [e, events] = co_await state.engine.submit(std::move(parsed->generate), kTuple);
  if (e) {
    Reply reply = reply_for(as_error(e));
    co_return co_await write_reply(stream, req, reply, keep_alive);
  }
  const std::string id = (api == Api::kChat ? "chatcmpl-" : "cmpl-") + std::to_string(events->id());
  const std::int64_t created = unix_seconds();
  if (streaming) {
    ChunkWriter writer(api, state.model, id, created, include_usage, logprobs, tool_calls);
    co_return co_await stream_events(stream, req, state, events, writer, samples, keep_alive,
                                     queued);
  }
  CompletionBuilder builder(api, state.model, id, created, samples, logprobs, tool_calls);
  TokenTimer timer(state);
  for (int finals = 0; finals < samples;) {
    auto [ne, event] = co_await events->next(kTuple);
    queued.release();
    if (!ne) timer.on_event(event);
    if (ne) {
      Reply reply = reply_for(as_error(ne));
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
    if (event.kind == Event::Kind::kFinal) {
      ++finals;
      if (event.finish_reason == FinishReason::kError) {
        state.engine.cancel(events->id());
        {
          Reply reply =
              error_reply(http::status::internal_server_error, event.error, "server_error");
          co_return co_await write_reply(stream, req, reply, keep_alive);
        }
      }
    }
    builder.add(event);
  }
  {
    Reply reply = Reply{http::status::ok, builder.json() + "\n"};
    co_return co_await write_reply(stream, req, reply, keep_alive);
  }
}

// POST /v1/embeddings: parsed by gateway_embeddings, run by Engine::embed (batched with
// other requests' inputs), answered in OpenAI's shape.
asio::awaitable<bool> serve_embeddings(beast::tcp_stream& stream, const Request& req,
                                       GatewayState& state, bool keep_alive) {
  ++state.live_generations;
  struct Done {
    GatewayState& state;
    ~Done() { --state.live_generations; }
  } done{state};
  if (const Refusal why = refusal_for_new_generation(state); why != Refusal::kNone) {
    Reply reply = refusal_reply(why, state);
    co_return co_await write_reply(stream, req, reply, keep_alive);
  }
  auto parsed = parse_embeddings_request(req.body(), state.model, state.engine.embedding_size());
  if (!parsed) {
    Reply reply = reply_for(parsed.error());
    co_return co_await write_reply(stream, req, reply, keep_alive);
  }
  auto [e, result] = co_await state.engine.embed(parsed->request, kTuple);
  Reply reply = e ? reply_for(as_error(e))
                  : Reply{http::status::ok, embeddings_response_json(result, *parsed, state.model)};
  co_return co_await write_reply(stream, req, reply, keep_alive);
}

// One request: routes it and writes the answer; false when the connection should close.
asio::awaitable<bool> serve(beast::tcp_stream& stream, const Request& req, GatewayState& state) {
  const bool keep_alive = req.keep_alive();
  const std::string_view target(req.target().data(), req.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const bool get = req.method() == http::verb::get;
  const bool post = req.method() == http::verb::post;
  auto method_not_allowed = [&](const char* allow) {
    Reply r = error_reply(http::status::method_not_allowed,
                          std::string(req.method_string()) + " is not allowed on " +
                              std::string(path) + "; use " + allow,
                          "invalid_request_error", {}, "method_not_allowed");
    r.allow = allow;
    return r;
  };
  if (path == "/health") {
    if (!get) {
      Reply reply = method_not_allowed("GET");
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
    {
      Reply reply = Reply{http::status::ok, "{\"status\":\"ok\"}\n"};
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
  }
  if (path == "/v1/models") {
    if (!get) {
      Reply reply = method_not_allowed("GET");
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
    {
      Reply reply = Reply{http::status::ok, models_json(state.model)};
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
  }
  if (path == "/metrics") {
    if (!get) {
      Reply reply = method_not_allowed("GET");
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
    auto [e, metrics] = co_await state.engine.metrics(kTuple);
    if (e) {
      Reply reply = reply_for(as_error(e));
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
    {
      Reply reply =
          Reply{http::status::ok, prometheus_text(metrics, state), "text/plain; version=0.0.4"};
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
  }
  if (path == "/v1/completions" || path == "/v1/chat/completions" || path == "/v1/embeddings") {
    if (!post) {
      Reply reply = method_not_allowed("POST");
      co_return co_await write_reply(stream, req, reply, keep_alive);
    }
    if (!is_json_content_type(req[http::field::content_type])) {
      {
        Reply reply = error_reply(http::status::unsupported_media_type,
                                  "the body must be JSON with Content-Type: application/json",
                                  "invalid_request_error", {}, "unsupported_media_type");
        co_return co_await write_reply(stream, req, reply, keep_alive);
      }
    }
    if (path == "/v1/embeddings")
      co_return co_await serve_embeddings(stream, req, state, keep_alive);
    co_return co_await serve_generation(
        stream, req, state, path == "/v1/completions" ? Api::kCompletions : Api::kChat, keep_alive);
  }
  {
    Reply reply = error_reply(http::status::not_found, "no route for " + std::string(path),
                              "invalid_request_error", {}, "not_found");
    co_return co_await write_reply(stream, req, reply, keep_alive);
  }
}

asio::awaitable<void> run_session(std::shared_ptr<GatewayState> state, tcp::socket socket) {
  struct Held {
    GatewayState& state;
    explicit Held(GatewayState& s) : state(s) {
      state.peak_connections = std::max(state.peak_connections, ++state.connections);
    }
    ~Held() { --state.connections; }
  } held{*state};
  // Over the limit, the connection's first request is read (so that the client gets the
  // answer rather than a reset) and answered 503, and the connection closes.
  const bool over_limit = state->connections > state->config.max_connections;
  if (over_limit) ++state->connections_refused;
  beast::tcp_stream stream(std::move(socket));
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(state->config.body_limit_bytes);
    stream.expires_after(std::chrono::seconds(state->config.idle_timeout_s));
    auto [ec, n] = co_await http::async_read(stream, buffer, parser, kTuple);
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == asio::error::connection_reset || ec == asio::error::eof) {
      break;
    }
    if (ec) {
      // The request could not be read whole: answer once and close, since the stream's
      // framing can no longer be trusted.
      Request bad_req;
      bad_req.version(11);
      const bool too_large = ec == http::error::body_limit;
      Reply reply =
          too_large
              ? error_reply(http::status::payload_too_large,
                            "the body is larger than the limit of " +
                                std::to_string(state->config.body_limit_bytes) + " bytes",
                            "invalid_request_error", {}, "body_too_large")
              : error_reply(http::status::bad_request, "malformed HTTP request: " + ec.message(),
                            "invalid_request_error", {}, "malformed_request");
      stream.expires_after(std::chrono::seconds(5));
      co_await write_reply(stream, bad_req, reply, false);
      break;
    }
    Request req = parser.release();
    stream.expires_never();  // a generation may take longer than the idle limit
    if (over_limit) {
      Reply reply = error_reply(http::status::service_unavailable,
                                "the server holds its limit of " +
                                    std::to_string(state->config.max_connections) +
                                    " connections; retry later",
                                "server_error", {}, "overloaded");
      reply.retry_after_s = state->config.retry_after_s;
      co_await write_reply(stream, req, reply, false);
      break;
    }
    if (beast::websocket::is_upgrade(req)) {
      const std::string_view target(req.target().data(), req.target().size());
      if (target.substr(0, target.find('?')) == "/ws") {
        co_await run_websocket_session(state, std::move(stream), std::move(req));
        co_return;
      }
      {
        Reply reply =
            error_reply(http::status::not_found, "WebSocket connections are served on /ws",
                        "invalid_request_error", {}, "not_found");
        co_await write_reply(stream, req, reply, false);
      }
      break;
    }
    if (!co_await serve(stream, req, *state)) break;
  }
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

asio::awaitable<void> accept_loop(std::shared_ptr<GatewayState> state, tcp::acceptor& acceptor) {
  for (;;) {
    auto [ec, socket] = co_await acceptor.async_accept(kTuple);
    if (ec == asio::error::operation_aborted || state->stopping) co_return;
    if (ec) continue;  // e.g. too many open files: keep serving the connections already held
    socket.set_option(tcp::no_delay(true));
    if (state->config.socket_send_buffer_bytes > 0) {
      beast::error_code ignored;
      socket.set_option(asio::socket_base::send_buffer_size(state->config.socket_send_buffer_bytes),
                        ignored);
    }
    asio::co_spawn(acceptor.get_executor(), run_session(state, std::move(socket)), asio::detached);
  }
}

}  // namespace

Refusal refusal_for_new_generation(GatewayState& state) {
  Refusal why = Refusal::kNone;
  if (state.stopping) {
    why = Refusal::kDraining;
  } else if (state.live_generations > state.config.max_live_requests) {
    why = Refusal::kTooManyLive;
  } else if (state.config.max_queued_requests > 0 &&
             state.queued_generations >= state.config.max_queued_requests) {
    why = Refusal::kTooManyQueued;
  }
  if (why == Refusal::kTooManyQueued) {
    ++state.requests_throttled;
  } else if (why != Refusal::kNone) {
    ++state.requests_refused;
  }
  return why;
}

GatewayServer::GatewayServer(const asio::any_io_executor& executor, Engine& engine,
                             ServedModel model, GatewayConfig config)
    : executor_(executor),
      state_(std::make_shared<GatewayState>(
          GatewayState{engine, std::move(model), std::move(config)})) {}

GatewayServer::~GatewayServer() = default;

Result<tcp::endpoint> GatewayServer::listen() {
  beast::error_code ec;
  const auto address = asio::ip::make_address(state_->config.host, ec);
  if (ec) {
    return Error(ErrorCode::kInvalidArgument,
                 "host: \"" + state_->config.host + "\" is not an IP address");
  }
  const tcp::endpoint wanted(address, state_->config.port);
  acceptor_ = std::make_unique<tcp::acceptor>(executor_);
  if (acceptor_->open(wanted.protocol(), ec); !ec) {
    acceptor_->set_option(asio::socket_base::reuse_address(true), ec);
    acceptor_->bind(wanted, ec);
  }
  if (!ec) acceptor_->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Error(ErrorCode::kIo, "cannot listen on " + state_->config.host + ":" +
                                     std::to_string(state_->config.port) + ": " + ec.message());
  }
  const tcp::endpoint bound = acceptor_->local_endpoint(ec);
  asio::co_spawn(executor_, accept_loop(state_, *acceptor_), asio::detached);
  return bound;
}

void GatewayServer::stop() {
  state_->stopping = true;
  if (acceptor_) {
    beast::error_code ignored;
    acceptor_->close(ignored);
  }
}

}  // namespace weft::gateway
