// `weft serve`: the OpenAI-compatible HTTP API and the WebSocket protocol on one port, in
// front of one Engine (docs/http-api.md, docs/websocket.md). Prints the address it listens on.
// SIGINT or SIGTERM drains: the server stops accepting, new generations get 503, live ones run
// on for up to --shutdown-timeout seconds, then the engine shuts down (those still live end
// with finish reason "shutdown") and the process exits 0. A second signal exits at once with
// 128 + the signal's number.

#include <pthread.h>

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "actors/device_backend.hpp"
#include "actors/gateway_server.hpp"
#include "loaders/chat_template_file.hpp"
#include "loaders/tokenizer_json.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/default_model.hpp"
#include "tools/weft/kv_compress_option.hpp"
#include "tools/weft/load_progress.hpp"
#include "tools/weft/pipeline_options.hpp"
#include "tools/weft/quantize_option.hpp"
#include "tools/weft/speculative_options.hpp"
#include "tools/weft/tensor_parallel.hpp"
#include "weft/engine.hpp"

namespace weft::cli {
namespace {

namespace asio = boost::asio;

struct ServeOptions {
  std::string model_dir;
  std::string quantize;  // --quantize: a block format name, empty for none
  gateway::GatewayConfig gateway;
  std::int64_t kv_budget_mb = 256;
  unsigned threads = 0;
  int max_running = EngineConfig{}.max_running;
  int max_tokens_per_step = 0;  // 0: EngineConfig's default (512 per GPU of a TP group)
  std::string admission = EngineConfig{}.admission;
  std::string schedule_policy = EngineConfig{}.schedule_policy;
  std::string tool_call_format = "auto";
  std::string prefix_cache = "on";
  std::string device = "auto";
  std::string kv_cache_dtype = "auto";
  KvCompressOptions kv_compress;
  double gpu_memory_fraction = 0.0;
  double shutdown_timeout_s = 30;
  int tensor_parallel = 1;
  PipelineOptions pipeline;
  SpeculativeOptions speculative;
};

// Names the calling thread as `top` and /proc show it (15 characters at most).
void name_thread(const char* name) {
  pthread_setname_np(pthread_self(), name);
}

// How the model writes tool calls: --tool-call-format, or read from its chat template.
grammar::ToolCallFormat tool_call_format(const ServeOptions& opts) {
  if (auto f = grammar::tool_call_format_from_name(opts.tool_call_format)) return *f;
  auto file = read_chat_template_file(opts.model_dir);
  std::string source;
  if (file) {
    for (const auto& [name, text] : file->templates) {
      if (name == "tool_use" || source.empty()) source = text;
    }
  }
  return grammar::detect_tool_call_format(source);
}

int run_serve(const ServeOptions& opts) {
  try {
    // The gateway's sessions on this thread; the engine's actors (each a strand) on two
    // threads of their own, so that JSON and socket work never delays a step, a grammar's
    // masks are computed beside the step loop, and each side's CPU time shows apart
    // (bench/gateway_load.js reads the gateway thread's).
    asio::io_context io(1);
    constexpr int kEngineThreads = 2;
    asio::io_context engine_io(kEngineThreads);
    auto engine_work = asio::make_work_guard(engine_io);
    std::vector<std::thread> engine_threads;
    for (int i = 0; i < kEngineThreads; ++i) {
      engine_threads.emplace_back([&engine_io] {
        name_thread("weft-engine");
        engine_io.run();
      });
    }
    struct JoinEngineThreads {
      asio::io_context& io;
      std::vector<std::thread>& threads;
      ~JoinEngineThreads() {
        io.stop();
        for (auto& t : threads)
          if (t.joinable()) t.join();
      }
    } join_engine_threads{engine_io, engine_threads};
    EngineConfig config;
    config.model_dir = opts.model_dir;
    config.quantize = opts.quantize;
    config.kv_budget_bytes = opts.kv_budget_mb << 20;
    config.cpu_threads = opts.threads;
    config.device = opts.device;
    if (auto d = actors::parse_device(opts.device); d && d->cuda) {
      config.on_load_progress = upload_progress(actors::device_name(*d));
    }
    config.gpu_memory_fraction = opts.gpu_memory_fraction;
    config.max_running = opts.max_running;
    config.max_tokens_per_step = opts.max_tokens_per_step;
    config.admission = opts.admission;
    config.schedule_policy = opts.schedule_policy;
    config.kv_cache_dtype = opts.kv_cache_dtype;
    config.pipeline_parallel = opts.pipeline.stages;
    config.micro_batches = opts.pipeline.micro_batches;
    config.pp_groups = opts.pipeline.pp_groups;
    config.cpu_layers = opts.pipeline.cpu_layers;
    config.gpu_memory_budget_mb = opts.pipeline.gpu_memory_budget_mb;
    auto tp = start_tensor_parallel("serve", opts.tensor_parallel, config);
    if (tp.exit_code) return *tp.exit_code;
    config.tensor_parallel = tp.group;
    config.prefix_cache = opts.prefix_cache == "on";
    config.kv_compress_rate = opts.kv_compress.rate;
    config.kv_compress_window = opts.kv_compress.window;
    config.kv_compress_heads = opts.kv_compress.heads;
    apply_speculative_options(opts.speculative, config);
    auto engine_owner = std::make_unique<Engine>(engine_io.get_executor(), config);
    Engine& engine = *engine_owner;
    name_thread("weft-gateway");  // now: threads inherit the name of the one that starts them

    // The engine keeps its tokenizer inside; logprobs need each token's text here.
    // (An encoder-decoder folder may have none: its tokens then have no text.)
    auto loaded_tokenizer = loaders::load_tokenizer(opts.model_dir);
    std::shared_ptr<const text::Tokenizer> tokenizer =
        loaded_tokenizer ? loaded_tokenizer->tokenizer : nullptr;
    gateway::ServedModel model;
    model.name = std::filesystem::path(opts.model_dir).lexically_normal().filename().string();
    if (std::filesystem::path(opts.model_dir).extension() == ".gguf") {
      model.name = std::filesystem::path(opts.model_dir).stem().string();  // x.gguf serves "x"
    }
    if (model.name.empty()) {
      model.name = std::filesystem::path(opts.model_dir)
                       .lexically_normal()
                       .parent_path()
                       .filename()
                       .string();
    }
    model.tool_call_format = tool_call_format(opts);
    model.vocab_size = engine.vocab_size();
    model.context_length = engine.context_length();
    model.token_text = [tokenizer](std::int32_t id) {
      if (!tokenizer) return std::string();
      const std::uint32_t ids[] = {static_cast<std::uint32_t>(id)};
      auto text = tokenizer->decode(ids, false);
      return text ? *text : std::string();
    };

    gateway::GatewayServer server(io.get_executor(), engine, model, opts.gateway);
    const auto endpoint = server.listen().value();
    std::cout << "weft serve: " << model.name << " on http://" << endpoint.address().to_string()
              << ':' << endpoint.port() << " (WebSocket: ws://" << endpoint.address().to_string()
              << ':' << endpoint.port() << "/ws)" << std::endl;
    if (engine.embeds()) {
      std::cout << "weft serve: encoder-only model (" << engine.embedding_size()
                << "-number vectors): POST /v1/embeddings and WebSocket embeddings frames"
                << std::endl;
    } else {
      if (engine.encoder_decoder()) {
        std::cout << "weft serve: encoder-decoder model: the prompt is the encoder's input "
                     "(/v1/completions and WebSocket generate frames)"
                  << std::endl;
      }
      const EngineMetrics m = engine.metrics(asio::use_future).get();
      std::cout << "weft serve: KV pool of " << m.kv_pool_tokens << " tokens (" << m.kv_pages_total
                << " pages of " << m.kv_page_bytes << " bytes, " << m.kv_cache_dtype << " KV)"
                << std::endl;
      std::cout << "weft serve: scheduling: " << config.schedule_policy << " waiting queue, "
                << config.admission << " admission, at most " << config.max_running
                << " sequences and " << config.step_token_budget() << " tokens a step" << std::endl;
    }

    // After the engine has stopped, live answers still hold their final `shutdown` events:
    // let the sessions send them (for at most 5 s) before the loop stops.
    asio::steady_timer drain_timer(io);
    const auto drain_deadline = std::make_shared<std::chrono::steady_clock::time_point>();
    std::function<void()> drain = [&] {
      if (*drain_deadline == std::chrono::steady_clock::time_point{}) {
        *drain_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      }
      if (server.live_generations() == 0 || std::chrono::steady_clock::now() > *drain_deadline) {
        io.stop();
        return;
      }
      drain_timer.expires_after(std::chrono::milliseconds(10));
      drain_timer.async_wait([&](const boost::system::error_code&) { drain(); });
    };
    // Before that, live generations run on (new ones are refused) until they end or the
    // shutdown timeout passes.
    auto live_deadline = std::chrono::steady_clock::now();  // set when the signal comes
    std::function<void()> let_finish = [&] {
      if (server.live_generations() == 0 || std::chrono::steady_clock::now() >= live_deadline) {
        if (server.live_generations() > 0) {
          std::cerr << "weft serve: " << server.live_generations()
                    << " requests still live after the shutdown timeout; cancelling them"
                    << std::endl;
        }
        engine.shutdown(asio::bind_executor(io, [&](std::exception_ptr) { drain(); }));
        return;
      }
      drain_timer.expires_after(std::chrono::milliseconds(10));
      drain_timer.async_wait([&](const boost::system::error_code&) { let_finish(); });
    };
    asio::signal_set signals(io, SIGINT, SIGTERM);
    std::function<void(const boost::system::error_code&, int)> on_signal =
        [&](const boost::system::error_code& ec, int signo) {
          if (ec) return;
          if (server.stopping()) {
            std::cerr << "weft serve: second signal; exiting now" << std::endl;
            std::_Exit(128 + signo);
          }
          std::cerr << "weft serve: shutting down; " << server.live_generations()
                    << " requests live, waiting up to " << opts.shutdown_timeout_s
                    << " s for them (a second signal exits at once)" << std::endl;
          server.stop();
          live_deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(opts.shutdown_timeout_s));
          signals.async_wait(on_signal);
          let_finish();
        };
    signals.async_wait(on_signal);
    io.run();
    // ~Engine hands its actors' last work to the engine's loop, which still runs.
    engine_owner.reset();
    return 0;
  } catch (const Error& e) {
    std::cerr << "weft serve: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace

void add_serve_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "serve",
      "Serve a model over HTTP (OpenAI-compatible /v1/completions, /v1/chat/completions, "
      "/v1/models, /health, /metrics; /v1/embeddings for an encoder-only model such as BERT) and "
      "WebSocket (/ws) on one port.");
  auto opts = std::make_shared<ServeOptions>();
  add_model_option(cmd, opts->model_dir);
  add_quantize_option(cmd, opts->quantize);
  add_kv_compress_options(cmd, opts->kv_compress);
  cmd->add_option("--host", opts->gateway.host, "IP address to listen on")->capture_default_str();
  cmd->add_option("--port", opts->gateway.port, "TCP port; 0 picks a free one")
      ->capture_default_str();
  cmd->add_option("--max-body-bytes", opts->gateway.body_limit_bytes,
                  "largest request body or WebSocket message")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 30));
  cmd->add_option("--idle-timeout-s", opts->gateway.idle_timeout_s,
                  "seconds an HTTP connection may wait for its next request")
      ->capture_default_str()
      ->check(CLI::Range(1, 86400));
  cmd->add_option("--ws-idle-timeout-s", opts->gateway.ws_idle_timeout_s,
                  "seconds a WebSocket peer may stay silent (pings go out every half of it)")
      ->capture_default_str()
      ->check(CLI::Range(2, 86400));
  cmd->add_option("--ws-outbox-bytes", opts->gateway.ws_outbox_limit_bytes,
                  "bytes queued for a slow WebSocket reader before its streams and its socket "
                  "are paused")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 30));
  cmd->add_option("--socket-send-buffer-bytes", opts->gateway.socket_send_buffer_bytes,
                  "SO_SNDBUF of client sockets (0: the kernel's autotuning); small values make "
                  "--ws-outbox-bytes bound what a slow reader holds")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 30));
  cmd->add_option("--max-connections", opts->gateway.max_connections,
                  "TCP connections held at once; more are answered 503 and closed")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-live-requests", opts->gateway.max_live_requests,
                  "generations in flight over HTTP and WebSocket; more are answered 503 "
                  "(WebSocket: an `overloaded` error frame)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-queued-requests", opts->gateway.max_queued_requests,
                  "generations waiting for their first token (queued or in prefill); more are "
                  "answered 429 (WebSocket: a `rate_limited` error frame); 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--retry-after-s", opts->gateway.retry_after_s,
                  "the Retry-After header of 429 and 503 answers")
      ->capture_default_str()
      ->check(CLI::Range(1, 3600));
  cmd->add_option("--send-timeout-s", opts->gateway.send_timeout_s,
                  "seconds one SSE event may take to be written (a client that stopped reading) "
                  "before its request is cancelled and the connection closed; 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(0, 86400));
  cmd->add_option("--shutdown-timeout", opts->shutdown_timeout_s,
                  "on SIGINT/SIGTERM, seconds live requests may run on before they are "
                  "cancelled (finish reason `shutdown`); 0 cancels them at once")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 86400.0));
  cmd->add_option("--kv-budget-mb", opts->kv_budget_mb, "KV pool size in MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-running", opts->max_running, "sequences in one batch at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--max-tokens-per-step", opts->max_tokens_per_step,
                  "step token budget: prefill chunks and decodes per step (0: 512, or 512 per "
                  "GPU with --tensor-parallel on GPUs; docs/engine.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--admission", opts->admission,
                  "reserve: admit a request only when its whole output fits in the KV pool; "
                  "optimistic: admit what fits now and preempt when the pool runs out")
      ->capture_default_str()
      ->check(CLI::IsMember({"reserve", "optimistic"}));
  cmd->add_option("--schedule-policy", opts->schedule_policy,
                  "order of the waiting queue: fcfs (arrival order) or lof (longest max_tokens "
                  "first; for batch jobs whose max_tokens are the real lengths: docs/engine.md)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fcfs", "lof"}));
  cmd->add_option("--kv-cache-dtype", opts->kv_cache_dtype, kKvCacheDtypeHelp)
      ->capture_default_str();
  add_tensor_parallel_option(cmd, opts->tensor_parallel);
  add_pipeline_options(cmd, opts->pipeline);
  add_pp_groups_option(cmd, opts->pipeline);
  add_speculative_options(cmd, opts->speculative);
  cmd->add_option("--prefix-cache", opts->prefix_cache,
                  "on: keep finished requests' full KV pages and reuse them for any request "
                  "that starts with the same tokens (evicted LRU when the pool needs them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--threads", opts->threads, "CPU threads for the forward pass (0: all cores)")
      ->capture_default_str();
  cmd->add_option("--device", opts->device,
                  "where to run: auto (GPU 0 when one is visible, else cpu), cpu, cuda or cuda:N "
                  "(bf16 on the GPU)")
      ->capture_default_str();
  cmd->add_option("--gpu-memory-fraction", opts->gpu_memory_fraction,
                  "on a GPU: size the KV pool so the process uses this fraction of the GPU's "
                  "memory (0: use --kv-budget-mb)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--tool-call-format", opts->tool_call_format,
                  "how the model writes tool calls: hermes (<tool_call> tags, Qwen), "
                  "llama3_json (Llama 3.x), or auto (read from the chat template; hermes when "
                  "the template shows neither)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "hermes", "llama3_json"}));
  cmd->callback([opts, &exit_code] { exit_code = run_serve(*opts); });
}

}  // namespace weft::cli
