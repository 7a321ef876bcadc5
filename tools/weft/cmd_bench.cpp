// `weft bench`: an offline serving benchmark in the manner of vLLM's throughput benchmark.
// N requests of random token ids with fixed or sampled input/output lengths (or the lengths of
// a workload file, --dataset) arrive all at once or at a Poisson rate; each streams through
// the Engine's public API. The last stdout line is
// one JSON object with the figures; a progress bar goes to stderr. With a response format
// (--json-schema, --json-schema-dir, --regex, --grammar, --json-object) every request is
// constrained and the summary adds where the time of the masks went: computed under the forward
// pass, or waited for after it. --write-dataset records each request's prompt and the number of
// tokens it produced, so that an unconstrained run (--dataset) can replay exactly the same work.
// The requests' clients are in bench_requests.cpp, the report in bench_report.cpp.

#include <algorithm>
#include <atomic>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <random>
#include <sstream>
#include <thread>

#include "actors/device_backend.hpp"
#include "tools/weft/bench_dataset.hpp"
#include "tools/weft/bench_multi_turn.hpp"
#include "tools/weft/bench_options.hpp"
#include "tools/weft/bench_report.hpp"
#include "tools/weft/bench_requests.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/default_model.hpp"
#include "tools/weft/kv_compress_option.hpp"
#include "tools/weft/load_progress.hpp"
#include "tools/weft/pipeline_options.hpp"
#include "tools/weft/quantize_option.hpp"
#include "tools/weft/speculative_options.hpp"
#include "tools/weft/tensor_parallel.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft::cli {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

// The *.json files of a folder, in name order: request i is constrained by schema i mod N.
Result<std::vector<std::string>> read_schema_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> paths;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".json") paths.push_back(it->path());
  if (ec) return Error(ErrorCode::kInvalidArgument, dir + ": " + ec.message());
  if (paths.empty()) return Error(ErrorCode::kInvalidArgument, dir + ": no *.json files");
  std::sort(paths.begin(), paths.end());
  std::vector<std::string> schemas;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream text;
    text << in.rdbuf();
    if (!in) return Error(ErrorCode::kInvalidArgument, path.string() + ": cannot be read");
    schemas.push_back(text.str());
  }
  return schemas;
}

int run_bench(const BenchOptions& o) {
  ResponseFormat format;
  std::vector<std::string> schemas;  // --json-schema-dir: one per request, round robin
  auto read_file = [](const std::string& path, std::string& out) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return false;
    std::ostringstream text;
    text << in.rdbuf();
    out = text.str();
    return true;
  };
  if (!o.json_schema_file.empty() || !o.grammar_file.empty()) {
    const bool schema = !o.json_schema_file.empty();
    const std::string& path = schema ? o.json_schema_file : o.grammar_file;
    format.type = schema ? ResponseFormat::Type::kJsonSchema : ResponseFormat::Type::kGrammar;
    if (!read_file(path, format.source)) {
      std::cerr << "weft bench: " << path << ": cannot be read\n";
      return 1;
    }
  } else if (!o.json_schema_dir.empty()) {
    auto read = read_schema_dir(o.json_schema_dir);
    if (!read) {
      std::cerr << "weft bench: --json-schema-dir: " << read.error().what() << '\n';
      return 1;
    }
    schemas = std::move(*read);
    format.type = ResponseFormat::Type::kJsonSchema;
    format.source = schemas.front();
  } else if (!o.regex.empty()) {
    format.type = ResponseFormat::Type::kRegex;
    format.source = o.regex;
  } else if (o.json_object) {
    format.type = ResponseFormat::Type::kJsonObject;
  }
  auto device = actors::parse_device(o.device);
  if (!device) {
    std::cerr << "weft bench: --device: " << device.error().what() << "\n";
    return 1;
  }
  const std::string resolved_device = actors::device_name(*device);
  EngineConfig config;
  config.model_dir = o.model_dir;
  config.quantize = o.quantize;
  config.device = resolved_device;
  if (device->cuda) config.on_load_progress = upload_progress(resolved_device);
  config.gpu_memory_fraction = o.gpu_memory_fraction;
  config.page_size = o.page_size;
  config.kv_budget_bytes = o.kv_budget_mb << 20;
  config.kv_cache_dtype = o.kv_cache_dtype;
  config.max_tokens_per_step = o.max_tokens_per_step;
  config.max_running = o.max_running;
  config.admission = o.admission;
  config.schedule_policy = o.schedule_policy;
  config.cpu_threads = o.threads;
  config.jump_forward = !o.no_jump_forward;
  config.pipeline_parallel = o.pipeline.stages;
  config.micro_batches = o.pipeline.micro_batches;
  config.pp_groups = o.pipeline.pp_groups;
  config.cpu_layers = o.pipeline.cpu_layers;
  config.gpu_memory_budget_mb = o.pipeline.gpu_memory_budget_mb;
  auto tp = start_tensor_parallel("bench", o.tensor_parallel, config);
  if (tp.exit_code) return *tp.exit_code;
  config.tensor_parallel = tp.group;
  config.prefix_cache = o.prefix_cache == "on";
  config.overlap_steps = o.overlap_steps == "on";
  config.step_trace_path = o.step_trace;
  config.kv_compress_rate = o.kv_compress.rate;
  config.kv_compress_window = o.kv_compress.window;
  config.kv_compress_heads = o.kv_compress.heads;
  apply_speculative_options(o.speculative, config);
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  std::optional<Engine> engine;
  try {
    engine.emplace(runtime.executor(), config);
  } catch (const Error& e) {
    std::cerr << "weft bench: " << e.what() << '\n';
    return 1;
  }
  if (o.multi_turn > 0) {
    const MultiTurnOptions mt{o.num_requests, o.multi_turn, o.system_prompt_len, o.input_len,
                              o.output_len,   o.seed,       o.temperature};
    const MultiTurnResult result = run_multi_turn(*engine, runtime.executor(), mt);
    const EngineMetrics metrics = engine->metrics(asio::use_future).get();
    engine->shutdown(asio::use_future).get();
    boost::json::object out = report_multi_turn(result, metrics, mt);
    out["prefix_cache"] = o.prefix_cache;
    out["device"] = resolved_device;
    out["model"] = o.model_dir;
    std::cout << boost::json::serialize(out) << std::endl;
    return result.failed == 0 ? 0 : 1;
  }
  // Requests: random ids (as vLLM's random dataset), lengths uniform in L*(1 +- ratio).
  std::mt19937_64 rng(o.seed);
  auto length = [&](int mean) {
    const int lo = std::max(1, static_cast<int>(mean * (1.0 - o.range_ratio)));
    const int hi = std::max(lo, static_cast<int>(mean * (1.0 + o.range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::uniform_int_distribution<int> token(0, engine->vocab_size() - 1);
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);
  std::vector<BenchRequestShape> shapes;
  if (!o.dataset.empty()) {
    auto read = read_bench_dataset(o.dataset, engine->vocab_size());
    if (!read) {
      std::cerr << "weft bench: --dataset: " << read.error().what() << '\n';
      engine->shutdown(asio::use_future).get();
      return 1;
    }
    shapes = std::move(*read);
    if (o.num_requests_given && o.num_requests < static_cast<int>(shapes.size()))
      shapes.resize(static_cast<std::size_t>(o.num_requests));
  } else {
    for (int i = 0; i < o.num_requests; ++i) {
      BenchRequestShape shape;
      shape.input_len = length(o.input_len);
      shape.output_len = length(o.output_len);
      shapes.push_back(std::move(shape));
    }
  }
  const int num_requests = static_cast<int>(shapes.size());
  std::vector<RequestTimes> times(static_cast<std::size_t>(num_requests));
  ProgressBar progress(num_requests);
  const auto start = Clock::now() + std::chrono::milliseconds(20);
  double offset_s = 0;
  std::vector<std::future<void>> done;
  std::vector<std::promise<void>> finished(static_cast<std::size_t>(num_requests));
  std::vector<std::vector<std::int32_t>> prompts;  // for --write-dataset
  std::vector<GenerateRequest> requests;
  std::vector<Clock::time_point> arrivals;
  for (int i = 0; i < num_requests; ++i) {
    GenerateRequest r;
    auto& shape = shapes[static_cast<std::size_t>(i)];
    r.prompt_ids = std::move(shape.prompt_ids);
    // --repeat-prompt K: a random block of input_len / K tokens, K times (a prompt that
    // prompt lookup can draft from, like a summary quoting its document).
    const int block = std::max(1, shape.input_len / std::max(1, o.repeat_prompt));
    for (int t = static_cast<int>(r.prompt_ids.size()); t < shape.input_len; ++t)
      r.prompt_ids.push_back(t >= block ? r.prompt_ids[static_cast<std::size_t>(t - block)]
                                        : token(rng));
    r.sampling.max_tokens = shape.output_len;
    r.sampling.ignore_eos = true;
    r.sampling.temperature = o.temperature;
    r.sampling.top_p = o.top_p;
    r.sampling.top_k = o.top_k;
    r.sampling.seed = o.seed * 1000003u + static_cast<std::uint64_t>(i);
    r.response_format = format;
    if (!schemas.empty())
      r.response_format.source = schemas[static_cast<std::size_t>(i) % schemas.size()];
    if (!o.write_dataset.empty()) prompts.push_back(r.prompt_ids);
    if (o.request_rate > 0) offset_s += gap(rng);
    arrivals.push_back(start + std::chrono::duration_cast<Clock::duration>(
                                   std::chrono::duration<double>(offset_s)));
    requests.push_back(std::move(r));
  }
  // Closed loop (--max-concurrency): N clients, each sending its next request (in order, from
  // a shared counter) when its previous one has finished, so no request queues in the engine
  // behind others. A coroutine lambda's frame refers to the lambda object (its captures are
  // not copied into the frame), so the lambda and the counter live until every client has
  // finished (the f.get() below): declared inside the branch, they were freed while the
  // clients still ran (ThreadSanitizer: heap-use-after-free on the counter).
  std::atomic<int> next{0};
  auto client = [&]() -> asio::awaitable<void> {
    for (int i; (i = next.fetch_add(1)) < num_requests;) {
      const auto k = static_cast<std::size_t>(i);
      co_await run_request(*engine, std::move(requests[k]), std::max(start, Clock::now()), times[k],
                           progress);
    }
  };
  if (o.max_concurrency > 0) {
    for (int c = 0; c < std::min(o.max_concurrency, num_requests); ++c)
      done.push_back(asio::co_spawn(runtime.executor(), client(), asio::use_future));
  } else {
    done.push_back(asio::co_spawn(
        runtime.executor(), submit_in_order(*engine, requests, arrivals, times, progress, finished),
        asio::use_future));
    for (auto& f : finished)
      done.push_back(f.get_future());
  }
  for (auto& f : done)
    f.get();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EngineMetrics metrics = engine->metrics(asio::use_future).get();
  engine->shutdown(asio::use_future).get();
  if (!o.write_dataset.empty() && !write_dataset_file(o.write_dataset, prompts, times)) {
    std::cerr << "weft bench: --write-dataset: " << o.write_dataset << ": cannot be written\n";
    return 1;
  }

  BenchOptions ran = o;  // the report names the step budget the engine ran with
  ran.max_tokens_per_step = config.step_token_budget();
  return report_bench(ran, times, metrics, seconds, resolved_device, format, schemas);
}

}  // namespace

void add_bench_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "bench",
      "Serving benchmark: N requests of random tokens (or a workload file's lengths, "
      "--dataset), all at once (offline) or at a Poisson rate (online), through the engine. "
      "Prints a summary; the last line is one JSON object.");
  auto opts = std::make_shared<BenchOptions>();
  add_model_option(cmd, opts->model_dir);
  add_quantize_option(cmd, opts->quantize);
  auto* num_requests =
      cmd->add_option("--num-requests", opts->num_requests,
                      "requests to run (with --dataset: the first N of the file; default all)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1000000));
  auto* input_len =
      cmd->add_option("--input-len", opts->input_len, "prompt tokens per request (mean)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1 << 20));
  auto* output_len =
      cmd->add_option("--output-len", opts->output_len, "output tokens per request (mean)")
          ->capture_default_str()
          ->check(CLI::Range(1, 1 << 20));
  auto* range_ratio =
      cmd->add_option("--range-ratio", opts->range_ratio,
                      "sample lengths uniformly in L*(1-r)..L*(1+r); 0: fixed lengths")
          ->capture_default_str()
          ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--dataset", opts->dataset,
                  "JSON-lines workload, one request per line: {\"input_len\": N or "
                  "\"prompt_ids\": [...], \"output_len\": M} (bench/make_sharegpt_workload.py "
                  "writes a ShareGPT-shaped one); replaces --input-len/--output-len/--range-ratio")
      ->excludes(input_len)
      ->excludes(output_len)
      ->excludes(range_ratio);
  cmd->add_option("--request-rate", opts->request_rate,
                  "Poisson arrival rate in requests/s; 0: all requests at once")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--max-concurrency", opts->max_concurrency,
                  "closed loop: N clients, each sending its next request when its last one "
                  "finished (TTFT without queueing behind other requests); 0: no limit")
      ->capture_default_str()
      ->check(CLI::Range(0, 1000000))
      ->excludes("--request-rate");
  cmd->add_option("--seed", opts->seed, "seed for lengths, tokens and arrivals")
      ->capture_default_str();
  cmd->add_option("--device", opts->device,
                  "where to run: auto (GPU 0 when one is visible, else cpu), cpu, cuda or cuda:N "
                  "(bf16 on the GPU)")
      ->capture_default_str();
  cmd->add_option("--temperature", opts->temperature, "sampling temperature; 0: greedy")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", opts->top_p, "nucleus sampling mass (0, 1]; 1: off")
      ->capture_default_str()
      ->check(CLI::Range(1e-6, 1.0));
  cmd->add_option("--top-k", opts->top_k, "keep the k most likely tokens; 0: off")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--gpu-memory-fraction", opts->gpu_memory_fraction,
                  "on a GPU: size the KV pool so the process uses this fraction of the GPU's "
                  "memory (0: use --kv-budget-mb)")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 0.99));
  cmd->add_option("--page-size", opts->page_size, "KV page size in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--kv-cache-dtype", opts->kv_cache_dtype, kKvCacheDtypeHelp)
      ->capture_default_str();
  add_kv_compress_options(cmd, opts->kv_compress);
  cmd->add_option("--kv-budget-mb", opts->kv_budget_mb, "KV pool size in MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--max-tokens-per-step", opts->max_tokens_per_step,
                  "step token budget: prefill chunks and decodes per step (0: 512, or 512 per "
                  "GPU with --tensor-parallel on GPUs; docs/engine.md)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--max-running", opts->max_running, "sequences per batch at most")
      ->capture_default_str()
      ->check(CLI::Range(1, 65536));
  cmd->add_option("--admission", opts->admission,
                  "reserve: admit only what fits to completion; optimistic: preempt when full")
      ->capture_default_str()
      ->check(CLI::IsMember({"reserve", "optimistic"}));
  cmd->add_option("--schedule-policy", opts->schedule_policy,
                  "order of the waiting queue: fcfs (arrival) or lof (longest output first, by "
                  "max_tokens: an offline batch ends with its longest request's own steps)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fcfs", "lof"}));
  auto* schema = cmd->add_option("--json-schema", opts->json_schema_file,
                                 "constrain every request by this JSON Schema file");
  auto* schema_dir = cmd->add_option(
      "--json-schema-dir", opts->json_schema_dir,
      "constrain request i by the i-th (mod N) *.json schema of this folder, in name order: a "
      "different schema per request");
  auto* regex = cmd->add_option("--regex", opts->regex, "constrain every request by this regex");
  auto* grammar_opt =
      cmd->add_option("--grammar", opts->grammar_file, "constrain every request by this EBNF file");
  auto* object =
      cmd->add_flag("--json-object", opts->json_object, "constrain every request to a JSON object");
  cmd->add_flag("--no-jump-forward", opts->no_jump_forward,
                "sample every token, even where the grammar forces it");
  cmd->add_option("--write-dataset", opts->write_dataset,
                  "after the run, write each request's prompt ids and the number of tokens it "
                  "produced as a --dataset file, to replay the same work (e.g. unconstrained)");
  schema->excludes(schema_dir)->excludes(regex)->excludes(grammar_opt)->excludes(object);
  schema_dir->excludes(regex)->excludes(grammar_opt)->excludes(object);
  regex->excludes(grammar_opt)->excludes(object);
  grammar_opt->excludes(object);
  add_tensor_parallel_option(cmd, opts->tensor_parallel);
  add_pipeline_options(cmd, opts->pipeline);
  add_pp_groups_option(cmd, opts->pipeline);
  cmd->add_option("--threads", opts->threads, "CPU threads for the forward pass (0: all cores)")
      ->capture_default_str();
  cmd->add_option("--prefix-cache", opts->prefix_cache,
                  "on: reuse the KV pages of earlier requests' common prefixes (radix tree, "
                  "LRU eviction); off: compute every prompt in full")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  cmd->add_option("--overlap-steps", opts->overlap_steps,
                  "on: detokenize a step and end its finished sequences while the next step "
                  "runs; off: the serial step loop (the same output), for comparisons")
      ->capture_default_str()
      ->check(CLI::IsMember({"on", "off"}));
  auto* multi_turn =
      cmd->add_option("--multi-turn", opts->multi_turn,
                      "chat mode: --num-requests conversations of N turns sharing one system "
                      "prompt; turn k+1's prompt is turn k's prompt + output + --input-len new "
                      "tokens; --output-len tokens per turn; TTFT is reported per turn")
          ->check(CLI::Range(1, 10000));
  cmd->add_option("--system-prompt-len", opts->system_prompt_len,
                  "with --multi-turn: tokens of the system prompt all conversations share")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20))
      ->needs(multi_turn);
  multi_turn->excludes("--dataset")->excludes(range_ratio)->excludes("--request-rate");
  add_speculative_options(cmd, opts->speculative);
  cmd->add_option("--repeat-prompt", opts->repeat_prompt,
                  "each random prompt is a block of input-len / K tokens repeated K times (a "
                  "repetitive, summary-like prompt for --speculate prompt-lookup)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--step-trace", opts->step_trace,
                  "write one JSON line per planned step to FILE: sequences running and waiting, "
                  "decode rows and the keys they read, prefill rows, the requests admitted (prompt "
                  "and output lengths, in order), KV pages held; sched_sim_bench --step-trace "
                  "writes the same from its simulation (docs/engine.md#step-trace)");
  cmd->callback([opts, num_requests, &exit_code] {
    opts->num_requests_given = num_requests->count() > 0;
    exit_code = run_bench(*opts);
  });
}

}  // namespace weft::cli
