#include "actors/gateway_websocket.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/websocket.hpp>
#include <boost/json.hpp>
#include <deque>
#include <map>
#include <optional>

#include "actors/gateway_embeddings.hpp"

namespace weft::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace websocket = beast::websocket;
namespace json = boost::json;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);
constexpr std::size_t kReadChunk = 64 << 10;  // bytes read at a time from the socket

json::object usage_object(const Usage& usage) {
  return usage_json(usage).as_object();
}

// One connection. The reader parses frames and starts a pump per generate request; pumps and
// the reader queue frames in `outbox_`, which the one writer drains, since a WebSocket stream
// allows a single write in flight. Everything runs on the one executor of the connection.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<GatewayState> state, beast::tcp_stream stream)
      : state_(std::move(state)),
        ws_(std::move(stream)),
        wake_writer_(ws_.get_executor(), asio::steady_timer::time_point::max()),
        room_(ws_.get_executor(), asio::steady_timer::time_point::max()) {}

  asio::awaitable<void> run(beast::http::request<beast::http::string_body> request) {
    const GatewayConfig& config = state_->config;
    websocket::stream_base::timeout timeouts;
    timeouts.handshake_timeout = std::chrono::seconds(30);
    timeouts.idle_timeout = std::chrono::seconds(config.ws_idle_timeout_s);
    timeouts.keep_alive_pings = true;  // a ping at half the idle time; a pong counts as life
    ws_.set_option(timeouts);
    // The message limit is checked here, not by Beast: Beast would close the socket at once
    // while the client is still sending, and the client would see a reset (1006) instead of
    // our close frame. We stop reading and let the closing handshake drain the rest.
    ws_.read_message_max(0);
    ws_.set_option(websocket::stream_base::decorator(
        [](websocket::response_type& res) { res.set(beast::http::field::server, "weft"); }));
    auto [aec] = co_await ws_.async_accept(request, kTuple);
    if (aec) co_return;
    asio::co_spawn(ws_.get_executor(), writer(shared_from_this()), asio::detached);
    beast::flat_buffer buffer;
    for (;;) {
      co_await wait_for_room();
      if (closed_ || close_reason_) break;
      auto [ec, n] = co_await ws_.async_read_some(buffer, kReadChunk, kTuple);
      if (ec) {
        closed_ = true;  // the peer left, timed out, or the closing handshake finished
        break;
      }
      if (buffer.size() > config.body_limit_bytes) {
        outbox_.clear();
        outbox_bytes_ = 0;
        close_reason_ = websocket::close_reason(
            websocket::close_code::too_big,
            "message larger than " + std::to_string(config.body_limit_bytes) + " bytes");
        break;
      }
      if (!ws_.is_message_done()) continue;
      if (!ws_.got_text()) {
        violation(json::value(nullptr), "binary_frame",
                  "binary frames are not accepted; send JSON text frames");
      } else {
        on_frame(beast::buffers_to_string(buffer.data()));
      }
      buffer.consume(buffer.size());
    }
    for (auto& [key, live] : live_) {
      if (live.request_id) state_->engine.cancel(*live.request_id);
      live.cancel_requested = true;
    }
    wake_writer_.cancel();
    room_.cancel();
  }

 private:
  struct Live {
    std::optional<std::uint64_t> request_id;  // none while the engine has not answered submit
    bool cancel_requested = false;
  };

  void send(json::object frame) { send_text(json::serialize(frame)); }

  void send_text(std::string frame) {
    if (closed_ || close_reason_) return;
    outbox_.push_back(std::move(frame));
    outbox_bytes_ += outbox_.back().size();
    wake_writer_.cancel();
  }

  // Backpressure: while the client's queue is over its limit, the reader and the request
  // pumps wait here; the writer wakes them once it has sent half of the limit.
  asio::awaitable<void> wait_for_room() {
    if (outbox_bytes_ <= state_->config.ws_outbox_limit_bytes) co_return;
    ++state_->backpressure_pauses;
    while (outbox_bytes_ > state_->config.ws_outbox_limit_bytes / 2 && !closed_ && !close_reason_) {
      co_await room_.async_wait(kTuple);  // expires never; cancel() wakes every waiter
    }
  }

  void send_error(const json::value& id, std::string_view code, std::string_view message) {
    send(json::object{{"type", "error"}, {"id", id}, {"code", code}, {"message", message}});
  }

  // A frame the protocol does not allow: an error frame, and after too many, a close.
  void violation(const json::value& id, std::string_view code, std::string_view message) {
    send_error(id, code, message);
    if (++violations_ >= state_->config.max_protocol_violations && !close_reason_) {
      close_reason_ = websocket::close_reason(websocket::close_code::policy_error,
                                              "too many protocol violations");
      wake_writer_.cancel();
    }
  }

  void on_frame(const std::string& text) {
    json::error_code ec;
    json::value frame = json::parse(text, ec);
    if (ec) return violation(nullptr, "invalid_json", "the frame is not JSON: " + ec.message());
    if (!frame.is_object())
      return violation(nullptr, "invalid_frame", "the frame is not a JSON object");
    const json::object& object = frame.get_object();
    const json::value* id = object.if_contains("id");
    const json::value* type = object.if_contains("type");
    const json::value id_or_null = id ? *id : json::value(nullptr);
    if (!type || !type->is_string()) {
      return violation(id_or_null, "invalid_frame", "type: a string is required");
    }
    if (!id || !(id->is_string() || id->is_int64() || id->is_uint64())) {
      return violation(id_or_null, "invalid_frame", "id: a string or an integer is required");
    }
    const std::string key = json::serialize(*id);
    if (type->get_string() == "cancel") {
      auto it = live_.find(key);
      if (it == live_.end())
        return send_error(*id, "unknown_id", "id: no live request has this id");
      it->second.cancel_requested = true;
      if (it->second.request_id) state_->engine.cancel(*it->second.request_id);
      return;
    }
    const bool embeddings = type->get_string() == "embeddings";
    if (type->get_string() != "generate" && !embeddings) {
      return violation(*id, "invalid_frame",
                       "type: \"" + std::string(type->get_string()) +
                           "\" is not one of generate, embeddings, cancel");
    }
    if (live_.contains(key)) {
      return violation(*id, "duplicate_id", "id: a request with this id is still live");
    }
    if (embeddings) {
      // The HTTP route's body is the frame without its type and id: the same parser, the
      // same parameters and messages.
      json::object body = object;
      body.erase("type");
      body.erase("id");
      auto parsed = parse_embeddings_request(json::serialize(body), state_->model,
                                             state_->engine.embedding_size());
      if (!parsed) return send_error(*id, "invalid_parameter", parsed.error().what());
      live_.emplace(key, Live{});
      asio::co_spawn(ws_.get_executor(), embed(shared_from_this(), key, *id, std::move(*parsed)),
                     asio::detached);
      return;
    }
    auto parsed = parse_request(object, Api::kWebSocket, state_->model);
    if (!parsed) return send_error(*id, "invalid_parameter", parsed.error().what());
    live_.emplace(key, Live{});
    asio::co_spawn(ws_.get_executor(),
                   pump(shared_from_this(), key, *id, std::move(parsed->generate), parsed->logprobs,
                        parsed->tool_calls),
                   asio::detached);
  }

  // Streams one request's events to the client as token and done frames.
  static asio::awaitable<void> pump(std::shared_ptr<Connection> self, std::string key,
                                    json::value id, GenerateRequest request, bool logprobs,
                                    std::optional<grammar::ToolCallFormat> tool_format) {
    const int samples = request.sampling.n;
    ++self->state_->live_generations;
    struct Done {
      GatewayState& state;
      ~Done() { --state.live_generations; }
    } done{*self->state_};
    switch (refusal_for_new_generation(*self->state_)) {
      case Refusal::kNone:
        break;
      case Refusal::kDraining:
        self->live_.erase(key);
        self->send_error(id, "shutting_down",
                         "the server is shutting down and takes no new requests");
        co_return;
      case Refusal::kTooManyQueued:
        self->live_.erase(key);
        self->send_error(id, "rate_limited",
                         "too many requests are queued: " +
                             std::to_string(self->state_->config.max_queued_requests) +
                             " wait for their first token; retry later");
        co_return;
      case Refusal::kTooManyLive:
        self->live_.erase(key);
        self->send_error(
            id, "overloaded",
            "the server is overloaded: " + std::to_string(self->state_->config.max_live_requests) +
                " requests are in flight; retry later");
        co_return;
    }
    QueuedSlot queued(*self->state_);
    auto [e, events] = co_await self->state_->engine.submit(std::move(request), kTuple);
    if (e) {
      std::string message = "the engine refused the request";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        message = ex.what();
      }
      self->live_.erase(key);
      self->send_error(id, "invalid_request", message);
      co_return;
    }
    Live& live = self->live_.at(key);
    live.request_id = events->id();
    if (live.cancel_requested) self->state_->engine.cancel(events->id());
    TokenTimer timer(*self->state_);
    // With tools, per sample: its parser and the calls so far (for the done frame).
    std::vector<std::optional<ToolCallParser>> parsers;
    std::vector<ParsedToolCalls> parsed_calls;
    for (int finals = 0; finals < samples;) {
      auto [ne, event] = co_await events->next(kTuple);
      queued.release();
      if (!ne) timer.on_event(event);
      if (ne) {
        self->send_error(id, "engine_error", "the request's stream failed");
        break;
      }
      json::object frame;
      const auto index = static_cast<std::size_t>(std::max(event.index, 0));
      std::string text = event.text;
      std::optional<ParsedToolCalls> done_calls;
      if (tool_format) {
        if (parsers.size() <= index) {
          parsers.resize(index + 1);
          parsed_calls.resize(index + 1);
        }
        if (!parsers[index]) parsers[index].emplace(*tool_format, new_tool_call_id);
        auto pieces = event.kind == Event::Kind::kDelta ? parsers[index]->feed(event.text)
                                                        : parsers[index]->finish();
        text.clear();
        for (const ToolCallPiece& p : pieces) {
          if (p.kind == ToolCallPiece::Kind::kContent) {
            text += p.text;
            continue;
          }
          json::object call{
              {"type",
               p.kind == ToolCallPiece::Kind::kCallStart ? "tool_call" : "tool_call_arguments"},
              {"id", id},
              {"call_index", p.index}};
          if (p.kind == ToolCallPiece::Kind::kCallStart) {
            call["call_id"] = p.id;
            call["name"] = p.name;
          } else {
            call["arguments"] = p.text;
          }
          if (samples > 1) call["index"] = event.index;
          self->send(std::move(call));
        }
        collect(pieces, parsed_calls[index]);
        if (event.kind == Event::Kind::kFinal) done_calls = parsed_calls[index];
      }
      if (event.kind == Event::Kind::kDelta) {
        if (event.text.empty() && event.token_ids.empty()) continue;
        json::array ids;
        for (auto t : event.token_ids)
          ids.emplace_back(t);
        frame = {{"type", "token"}, {"id", id}, {"text", text}, {"token_ids", ids}};
        if (logprobs) frame["logprobs"] = chat_logprobs_json(event.logprobs, self->state_->model);
      } else {
        ++finals;
        if (event.finish_reason == FinishReason::kError) {
          frame = {
              {"type", "error"}, {"id", id}, {"code", "engine_error"}, {"message", event.error}};
        } else {
          const int calls = done_calls ? static_cast<int>(done_calls->calls.size()) : 0;
          frame = {{"type", "done"},
                   {"id", id},
                   {"finish_reason", finish_reason_name(event.finish_reason, calls)},
                   {"usage", usage_object(event.usage)}};
          if (calls > 0) frame["tool_calls"] = tool_calls_json(*done_calls);
          if (!text.empty()) {
            // Content held back because it might have opened a call: a last token frame.
            json::object rest{
                {"type", "token"}, {"id", id}, {"text", text}, {"token_ids", json::array{}}};
            if (samples > 1) rest["index"] = event.index;
            self->send(std::move(rest));
          }
        }
      }
      if (samples > 1) frame["index"] = event.index;
      self->send(std::move(frame));
      co_await self->wait_for_room();
    }
    self->live_.erase(key);
  }

  // One embeddings request: the engine batches it with other inputs; one frame answers it,
  // the HTTP route's response object with the frame's type and id in front.
  static asio::awaitable<void> embed(std::shared_ptr<Connection> self, std::string key,
                                     json::value id, ParsedEmbeddings parsed) {
    ++self->state_->live_generations;
    struct Done {
      GatewayState& state;
      ~Done() { --state.live_generations; }
    } done{*self->state_};
    switch (refusal_for_new_generation(*self->state_)) {
      case Refusal::kNone:
        break;
      case Refusal::kDraining:
        self->live_.erase(key);
        self->send_error(id, "shutting_down",
                         "the server is shutting down and takes no new requests");
        co_return;
      case Refusal::kTooManyQueued:
      case Refusal::kTooManyLive:
        self->live_.erase(key);
        self->send_error(
            id, "overloaded",
            "the server is overloaded: " + std::to_string(self->state_->config.max_live_requests) +
                " requests are in flight; retry later");
        co_return;
    }
    auto [e, result] = co_await self->state_->engine.embed(parsed.request, kTuple);
    self->live_.erase(key);
    if (e) {
      std::string message = "the engine refused the request";
      try {
        std::rethrow_exception(e);
      } catch (const std::exception& ex) {
        message = ex.what();
      }
      self->send_error(id, "invalid_request", message);
      co_return;
    }
    std::string body = embeddings_response_json(result, parsed, self->state_->model);
    while (!body.empty() && body.back() == '\n')
      body.pop_back();
    // body is {"object":"list",...}: the frame is {"type":"embeddings","id":ID,"object":...}.
    self->send_text("{\"type\":\"embeddings\",\"id\":" + json::serialize(id) + "," +
                    body.substr(1));
    co_await self->wait_for_room();
  }

  static asio::awaitable<void> writer(std::shared_ptr<Connection> self) {
    for (;;) {
      while (self->outbox_.empty() && !self->closed_ && !self->close_reason_) {
        self->wake_writer_.expires_at(asio::steady_timer::time_point::max());
        co_await self->wake_writer_.async_wait(kTuple);
      }
      if (self->closed_) break;
      if (!self->outbox_.empty()) {
        const std::string frame = std::move(self->outbox_.front());
        self->outbox_.pop_front();
        self->ws_.text(true);
        auto [ec, n] = co_await self->ws_.async_write(asio::buffer(frame), kTuple);
        self->outbox_bytes_ -= frame.size();
        if (self->outbox_bytes_ <= self->state_->config.ws_outbox_limit_bytes / 2) {
          self->room_.cancel();
        }
        if (ec) break;
        continue;
      }
      // A close we start: the handshake reads (and drops) what the client still sends until
      // its close frame arrives, so the client sees our code and reason.
      co_await self->ws_.async_close(*self->close_reason_, kTuple);
      break;
    }
    self->closed_ = true;
    self->room_.cancel();
  }

  std::shared_ptr<GatewayState> state_;
  websocket::stream<beast::tcp_stream> ws_;
  asio::steady_timer wake_writer_;
  asio::steady_timer room_;  // never expires: waiters in wait_for_room wake on cancel()
  std::deque<std::string> outbox_;
  std::size_t outbox_bytes_ = 0;
  std::map<std::string, Live> live_;  // by the client's id, serialized as JSON
  std::optional<websocket::close_reason> close_reason_;
  int violations_ = 0;
  bool closed_ = false;
};

}  // namespace

asio::awaitable<void> run_websocket_session(
    std::shared_ptr<GatewayState> state, beast::tcp_stream stream,
    beast::http::request<beast::http::string_body> request) {
  auto connection = std::make_shared<Connection>(std::move(state), std::move(stream));
  co_await connection->run(std::move(request));
}

}  // namespace weft::gateway
