#pragma once
// The gateway: one TCP port serving OpenAI's HTTP API (docs/http-api.md) and Weft's WebSocket
// protocol on /ws (docs/websocket.md) in front of an Engine. One coroutine per connection on
// the executor given; HTTP/1.1 keep-alive; a WebSocket upgrade hands the connection to a
// WebSocket session. Beast stays inside the .cpp files.

#include <array>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "actors/gateway_openai.hpp"
#include "weft/engine.hpp"
#include "weft/error.hpp"

namespace weft::gateway {

struct GatewayConfig {
  std::string host = "127.0.0.1";
  unsigned short port = 8000;              // 0: a free port, reported by listen()
  std::size_t body_limit_bytes = 1 << 20;  // request bodies and WebSocket messages
  int idle_timeout_s = 60;                 // an HTTP connection waiting for a request
  int max_protocol_violations = 8;         // WebSocket frames in error before closing
  // A WebSocket peer that sends nothing (not even a pong to our pings, sent every half of
  // this) for this long is disconnected.
  int ws_idle_timeout_s = 60;
  // Frames queued for one WebSocket client beyond this many bytes pause its requests'
  // streams and the reading of its socket until the queue is half drained.
  std::size_t ws_outbox_limit_bytes = 256 << 10;
  // SO_SNDBUF of accepted sockets; 0 leaves the kernel's autotuning, which on loopback lets
  // a socket buffer megabytes before a slow reader's queue starts to fill.
  int socket_send_buffer_bytes = 0;
  int max_connections = 4096;    // more get 503 and are closed
  int max_live_requests = 1024;  // generations in flight (HTTP and WebSocket); more get 503
  // Generations submitted that have not had their first token yet (waiting for admission or
  // in prefill); more get 429. 0: no limit.
  int max_queued_requests = 0;
  int retry_after_s = 1;  // the Retry-After header of 429 and 503 answers
  // An SSE event that cannot be written within this long (a reader that stopped reading)
  // cancels its request and closes the connection. 0: wait forever.
  int send_timeout_s = 60;
};

// A Prometheus histogram of seconds, with buckets from 1 ms to 10 s.
struct LatencyHistogram {
  static constexpr std::array<double, 12> kBounds = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,   1,    2.5,   5,    10};
  std::array<std::uint64_t, kBounds.size()> counts{};  // per bucket, not cumulative
  double sum = 0;
  std::uint64_t count = 0;
  void record(double seconds);
};

// What the sessions share: the engine, the model and the limits. Lives as long as the server.
struct GatewayState {
  Engine& engine;
  ServedModel model;
  GatewayConfig config;
  bool stopping = false;       // draining: no new connections, new generations get 503
  int live_generations = 0;    // requests whose answer is still being sent, HTTP and WebSocket
  int queued_generations = 0;  // submitted, first token not yet seen (max_queued_requests)
  int connections = 0;         // TCP connections held now
  int peak_connections = 0;
  std::uint64_t connections_refused = 0;  // over max_connections
  std::uint64_t requests_refused = 0;     // over max_live_requests, or while draining
  std::uint64_t requests_throttled = 0;   // over max_queued_requests (429)
  std::uint64_t send_timeouts = 0;        // SSE writes that stalled past send_timeout_s
  std::uint64_t backpressure_pauses = 0;  // a WebSocket client's queue went over its limit
  // As the gateway sees them: from the engine accepting a request (after tokenization) to
  // its first token, and between its token deltas.
  LatencyHistogram time_to_first_token;
  LatencyHistogram inter_token_latency;
};

// Counts a generation in queued_generations from submit until its first event (or its end).
class QueuedSlot {
 public:
  explicit QueuedSlot(GatewayState& state) : state_(state) { ++state_.queued_generations; }
  QueuedSlot(const QueuedSlot&) = delete;
  QueuedSlot& operator=(const QueuedSlot&) = delete;
  ~QueuedSlot() { release(); }
  void release() {
    if (held_) --state_.queued_generations;
    held_ = false;
  }

 private:
  GatewayState& state_;
  bool held_ = true;
};

// Why a new generation is refused now, if it is: the server is draining (503), over
// max_live_requests (503) or over max_queued_requests (429). Call after counting the request
// in live_generations, before counting it in queued_generations.
enum class Refusal { kNone, kDraining, kTooManyLive, kTooManyQueued };
Refusal refusal_for_new_generation(GatewayState& state);

// Times one request's deltas into the state's histograms; all on the sessions' one thread.
class TokenTimer {
 public:
  explicit TokenTimer(GatewayState& state)
      : state_(state), last_(std::chrono::steady_clock::now()) {}
  void on_event(const Event& event);

 private:
  GatewayState& state_;
  std::chrono::steady_clock::time_point last_;
  bool first_seen_ = false;
};

class GatewayServer {
 public:
  GatewayServer(const boost::asio::any_io_executor& executor, Engine& engine, ServedModel model,
                GatewayConfig config);
  ~GatewayServer();

  // Binds and starts accepting; the endpoint bound (with the real port when 0 was asked).
  Result<boost::asio::ip::tcp::endpoint> listen();
  // Stops accepting; live sessions end as their streams end, and new generations on
  // connections already open are answered 503 (WebSocket: a `shutting_down` error frame).
  void stop();
  // Requests whose answer is still being sent: after Engine::shutdown, waiting for this to
  // reach 0 lets clients receive their final `shutdown` events before the process exits.
  int live_generations() const { return state_->live_generations; }
  bool stopping() const { return state_->stopping; }

 private:
  boost::asio::any_io_executor executor_;
  std::shared_ptr<GatewayState> state_;
  std::unique_ptr<boost::asio::ip::tcp::acceptor> acceptor_;
};

}  // namespace weft::gateway
