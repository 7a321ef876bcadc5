// The step loop's host cost of constrained decoding, as a GPU meets it, measured on any CPU:
// the Engine runs on a simulated device (tests/actors/simulated_device.hpp) whose forward pass
// is a sleep of --forward-us per step and whose draws cost next to nothing, so every
// microsecond the actors spend between one step's sampled tokens and the next launch shows as
// a longer step. Requests are constrained by a JSON Schema (or a folder of them, one per
// request, or a regex), then the same prompts run unconstrained with the token counts the
// constrained run produced (ignore_eos), so the two differ only by the constraint work.
// The model is a one-layer Llama-shaped folder written here with the given tokenizer (its
// weights are zeros: the simulated device never reads them), so masks cover its vocabulary
// (128,256 tokens for Llama-3).
//
//   scripts/fetch-test-data build/release
//   build/release/bin/constrained_step_bench --tokenizer build/release/test-data/tokenizers/llama3
//       --schema tests/tools/grammar/schemas/44_order_document.json --batch 32 --requests 96
//
// Prints one line per run and a summary: steps, mean step ms, output tok/s, ITL p50, and the
// engine's constraint counters per constrained step.

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_args.hpp"
#include "tests/actors/simulated_device.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string tokenizer;
  std::string work = "build/constrained-step-bench-model";
  std::string schema, schema_dir, regex;
  int forward_us = 7000;
  int batch = 32;
  int requests = 96;
  int input_len = 32;
  int output_len = 128;
  int reps = 2;
  bool jump_forward = true;
  std::uint64_t seed = 1;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The highest token id of tokenizer.json (model.vocab and added_tokens) + 1.
int vocab_size(const std::string& tokenizer_json) {
  const boost::json::value doc = boost::json::parse(tokenizer_json);
  std::int64_t top = -1;
  for (const auto& [key, id] : doc.at("model").at("vocab").as_object())
    top = std::max(top, id.to_number<std::int64_t>());
  if (const auto* added = doc.as_object().if_contains("added_tokens")) {
    for (const auto& t : added->as_array())
      top = std::max(top, t.at("id").to_number<std::int64_t>());
  }
  return static_cast<int>(top + 1);
}

// A one-layer Llama folder (hidden 64) with zero bf16 weights and the tokenizer's files.
void write_model(const Options& o) {
  const fs::path dir = o.work;
  fs::create_directories(dir);
  const std::string tokenizer = read_text(fs::path(o.tokenizer) / "tokenizer.json");
  if (tokenizer.empty())
    throw std::runtime_error(o.tokenizer + "/tokenizer.json: missing or empty");
  const int vocab = vocab_size(tokenizer);
  const int hidden = 64, inter = 128, heads = 2, kv_heads = 1, head_dim = 32;
  boost::json::object config{{"architectures", boost::json::array{"LlamaForCausalLM"}},
                             {"model_type", "llama"},
                             {"hidden_size", hidden},
                             {"intermediate_size", inter},
                             {"num_attention_heads", heads},
                             {"num_key_value_heads", kv_heads},
                             {"head_dim", head_dim},
                             {"num_hidden_layers", 1},
                             {"vocab_size", vocab},
                             {"max_position_embeddings", 8192},
                             {"rms_norm_eps", 1e-5},
                             {"rope_theta", 500000.0},
                             {"hidden_act", "silu"},
                             {"tie_word_embeddings", true},
                             {"bos_token_id", 128000},
                             {"eos_token_id", 128001},
                             {"torch_dtype", "bfloat16"}};
  std::ofstream(dir / "config.json") << boost::json::serialize(config);
  std::ofstream(dir / "generation_config.json")
      << R"({"bos_token_id": 128000, "eos_token_id": 128001})";
  std::ofstream(dir / "tokenizer.json", std::ios::binary) << tokenizer;
  fs::copy_file(fs::path(o.tokenizer) / "tokenizer_config.json", dir / "tokenizer_config.json",
                fs::copy_options::overwrite_existing);
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors = {
      {"model.embed_tokens.weight", {vocab, hidden}},
      {"model.norm.weight", {hidden}},
      {"model.layers.0.input_layernorm.weight", {hidden}},
      {"model.layers.0.post_attention_layernorm.weight", {hidden}},
      {"model.layers.0.self_attn.q_proj.weight", {heads * head_dim, hidden}},
      {"model.layers.0.self_attn.k_proj.weight", {kv_heads * head_dim, hidden}},
      {"model.layers.0.self_attn.v_proj.weight", {kv_heads * head_dim, hidden}},
      {"model.layers.0.self_attn.o_proj.weight", {hidden, heads * head_dim}},
      {"model.layers.0.mlp.gate_proj.weight", {inter, hidden}},
      {"model.layers.0.mlp.up_proj.weight", {inter, hidden}},
      {"model.layers.0.mlp.down_proj.weight", {hidden, inter}},
  };
  boost::json::object header{{"__metadata__", boost::json::object{{"format", "pt"}}}};
  std::int64_t offset = 0;
  for (const auto& [name, shape] : tensors) {
    std::int64_t n = 2;
    boost::json::array dims;
    for (auto d : shape) {
      n *= d;
      dims.push_back(d);
    }
    header[name] = boost::json::object{{"dtype", "BF16"},
                                       {"shape", dims},
                                       {"data_offsets", boost::json::array{offset, offset + n}}};
    offset += n;
  }
  std::string h = boost::json::serialize(header);
  h.append((8 - h.size() % 8) % 8, ' ');
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const std::uint64_t len = h.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << h;
  const std::vector<char> zeros(1 << 20, 0);
  for (std::int64_t left = offset; left > 0;) {
    const auto n = std::min<std::int64_t>(left, static_cast<std::int64_t>(zeros.size()));
    out.write(zeros.data(), n);
    left -= n;
  }
}

struct RunResult {
  double wall_s = 0;
  std::vector<double> itl_ms, ttft_ms;
  std::vector<int> produced;  // output tokens per request
  int failed = 0;
  weft::EngineMetrics metrics;
  weft::test_support::SimulatedDeviceStats device;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

// One run: `requests` requests from `batch` clients, each sending its next request when its
// last one finished. formats[i] constrains request i (kText: unconstrained); max_tokens[i]
// caps it (ignore_eos when the run replays another).
RunResult run(const Options& o, const std::vector<std::vector<std::int32_t>>& prompts,
              const std::vector<weft::ResponseFormat>& formats, const std::vector<int>& max_tokens,
              bool replay) {
  weft::Runtime runtime(weft::RuntimeOptions{.worker_threads = 2});
  weft::EngineConfig config;
  config.model_dir = o.work;
  config.kv_budget_bytes = 256ll << 20;
  config.cpu_threads = 1;
  config.jump_forward = o.jump_forward;
  const auto forward = std::chrono::microseconds(o.forward_us);
  const std::uint64_t seed = o.seed;
  auto stats = std::make_shared<weft::test_support::SimulatedDeviceStats>();
  config.make_backend = [forward, seed, stats](const weft::model::Model& model, int pages) {
    return std::unique_ptr<weft::model::ForwardBackend>(
        std::make_unique<weft::test_support::SimulatedDevice>(model, pages, forward, seed, stats));
  };
  weft::Engine engine(runtime.executor(), config);
  RunResult r;
  r.produced.assign(prompts.size(), 0);
  std::atomic<std::size_t> next{0};
  std::mutex mutex;
  auto client = [&]() -> asio::awaitable<void> {
    for (;;) {
      const std::size_t i = next.fetch_add(1);
      if (i >= prompts.size()) co_return;
      weft::GenerateRequest request;
      request.prompt_ids = prompts[i];
      request.sampling.temperature = 0.0f;
      request.sampling.max_tokens = max_tokens[i];
      request.sampling.ignore_eos = replay;
      request.response_format = formats[i];
      const auto start = Clock::now();
      auto last = start;
      std::vector<double> itl;
      double ttft = 0;
      int produced = 0;
      bool failed = false;
      try {
        auto stream = co_await engine.submit(std::move(request), asio::use_awaitable);
        for (;;) {
          weft::Event e = co_await stream->next(asio::use_awaitable);
          const auto now = Clock::now();
          if (e.kind == weft::Event::Kind::kFinal) {
            failed = e.finish_reason == weft::FinishReason::kError;
            if (failed) std::fprintf(stderr, "request %zu: %s\n", i, e.error.c_str());
            break;
          }
          const double ms = std::chrono::duration<double, std::milli>(now - last).count();
          if (produced == 0) {
            ttft = ms;
          } else {
            itl.push_back(ms);
          }
          produced += static_cast<int>(e.token_ids.size());
          last = now;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "request %zu failed: %s\n", i, e.what());
        failed = true;
      }
      std::lock_guard lock(mutex);
      r.produced[i] = produced;
      r.failed += failed;
      r.ttft_ms.push_back(ttft);
      r.itl_ms.insert(r.itl_ms.end(), itl.begin(), itl.end());
    }
  };
  const auto start = Clock::now();
  std::vector<std::future<void>> done;
  for (int c = 0; c < o.batch; ++c)
    done.push_back(asio::co_spawn(runtime.executor(), client(), asio::use_future));
  for (auto& d : done)
    d.get();
  r.wall_s = std::chrono::duration<double>(Clock::now() - start).count();
  r.metrics = engine.metrics(asio::use_future).get();
  engine.shutdown(asio::use_future).get();
  r.device = *stats;
  return r;
}

void print(const char* tag, const RunResult& r) {
  long tokens = 0;
  for (int n : r.produced)
    tokens += n;
  const auto& m = r.metrics;
  const double steps = static_cast<double>(std::max<std::uint64_t>(1, m.steps));
  const double csteps = static_cast<double>(std::max<std::uint64_t>(1, m.constrained_steps));
  std::printf(
      "%-13s steps %5llu  step %.3f ms  out %.1f tok/s  ITL p50 %.3f p90 %.3f ms  TTFT p50 %.2f "
      "ms  per constrained step: accept %.1f us, masks %.1f us (waited %.1f), forced %llu, "
      "stop %llu, failed %d\n",
      tag, static_cast<unsigned long long>(m.steps), r.wall_s * 1000.0 / steps,
      static_cast<double>(tokens) / r.wall_s, percentile(r.itl_ms, 0.5), percentile(r.itl_ms, 0.9),
      percentile(r.ttft_ms, 0.5), static_cast<double>(m.constraint_accept_us) / csteps,
      static_cast<double>(m.mask_compute_us) / csteps, static_cast<double>(m.mask_wait_us) / csteps,
      static_cast<unsigned long long>(m.jump_forward_tokens),
      static_cast<unsigned long long>(m.finished_stop), r.failed);
  // The GPU's idle time per step: the gap before each launch and the lateness of each sample.
  const auto& d = r.device;
  std::vector<double> gap, late;
  for (std::size_t k = 0; k < d.late_us.size(); ++k) {
    late.push_back(d.late_us[k]);
    if (k < d.gap_us.size()) gap.push_back(d.gap_us[k]);
  }
  double gap_sum = 0, late_sum = 0;
  for (double g : gap)
    gap_sum += g;
  for (double l : late)
    late_sum += l;
  std::printf("%-13s device idle per step: gap p50 %.1f mean %.1f us, late p50 %.1f mean %.1f us\n",
              "", percentile(gap, 0.5),
              gap.empty() ? 0.0 : gap_sum / static_cast<double>(gap.size()), percentile(late, 0.5),
              late.empty() ? 0.0 : late_sum / static_cast<double>(late.size()));
  std::fflush(stdout);
}

int usage() {
  std::fprintf(stderr,
               "usage: constrained_step_bench --tokenizer DIR [--schema FILE | --schema-dir DIR | "
               "--regex RE] [--forward-us N (7000)] [--batch N (32)] [--requests N (96)] "
               "[--input-len N (32)] [--output-len N (128)] [--reps N (2)] [--no-jump-forward] "
               "[--work DIR (build/constrained-step-bench-model)]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  weft::bench::ArgCursor args(argc, argv);
  while (args.next()) {
    const std::string& a = args.flag();
    try {
      if (a == "--tokenizer")
        o.tokenizer = args.value();
      else if (a == "--work")
        o.work = args.value();
      else if (a == "--schema")
        o.schema = args.value();
      else if (a == "--schema-dir")
        o.schema_dir = args.value();
      else if (a == "--regex")
        o.regex = args.value();
      else if (a == "--forward-us")
        o.forward_us = args.number();
      else if (a == "--batch")
        o.batch = args.number();
      else if (a == "--requests")
        o.requests = args.number();
      else if (a == "--input-len")
        o.input_len = args.number();
      else if (a == "--output-len")
        o.output_len = args.number();
      else if (a == "--reps")
        o.reps = args.number();
      else if (a == "--no-jump-forward")
        o.jump_forward = false;
      else if (a == "--help" || a == "-h")
        return usage();
      else
        throw std::runtime_error("unknown option " + a);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "constrained_step_bench: %s\n", e.what());
      return usage();
    }
  }
  if (o.tokenizer.empty() || o.batch < 1 || o.requests < 1 || o.forward_us < 0) return usage();
  try {
    write_model(o);
    std::vector<weft::ResponseFormat> formats(static_cast<std::size_t>(o.requests));
    std::vector<std::string> schemas;
    if (!o.schema.empty()) schemas.push_back(read_text(o.schema));
    if (!o.schema_dir.empty()) {
      std::vector<fs::path> paths;
      for (const auto& e : fs::directory_iterator(o.schema_dir))
        if (e.path().extension() == ".json") paths.push_back(e.path());
      std::sort(paths.begin(), paths.end());
      for (const auto& p : paths)
        schemas.push_back(read_text(p));
    }
    for (std::size_t i = 0; i < formats.size(); ++i) {
      if (!schemas.empty()) {
        formats[i].type = weft::ResponseFormat::Type::kJsonSchema;
        formats[i].source = schemas[i % schemas.size()];
      } else if (!o.regex.empty()) {
        formats[i].type = weft::ResponseFormat::Type::kRegex;
        formats[i].source = o.regex;
      }
    }
    const int vocab = vocab_size(read_text(fs::path(o.tokenizer) / "tokenizer.json"));
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<int> token(0, std::min(vocab, 128000) - 1);
    std::vector<std::vector<std::int32_t>> prompts(formats.size());
    for (auto& p : prompts) {
      p.resize(static_cast<std::size_t>(o.input_len));
      for (auto& t : p)
        t = token(rng);
    }
    const std::vector<int> caps(formats.size(), o.output_len);
    const std::vector<weft::ResponseFormat> plain(formats.size());
    std::vector<double> c_step, u_step;
    // The simulated device draws from each row's context alone, so a request's output (and
    // its length) is the same in every constrained run: the first run's counts serve every
    // replay, and the order alternates from the second repetition on.
    std::vector<int> counts;
    for (int rep = 0; rep < o.reps; ++rep) {
      RunResult c, u;
      auto constrained = [&] {
        c = run(o, prompts, formats, caps, false);
        print("constrained", c);
        if (counts.empty()) counts = c.produced;
      };
      auto unconstrained = [&] {
        u = run(o, prompts, plain, counts, true);
        print("unconstrained", u);
      };
      if (rep % 2 == 0) {
        constrained();
        unconstrained();
      } else {
        unconstrained();
        constrained();
      }
      c_step.push_back(c.wall_s / static_cast<double>(std::max<std::uint64_t>(1, c.metrics.steps)));
      u_step.push_back(u.wall_s / static_cast<double>(std::max<std::uint64_t>(1, u.metrics.steps)));
    }
    double cs = 0, us = 0;
    for (std::size_t k = 0; k < c_step.size(); ++k) {
      cs += c_step[k];
      us += u_step[k];
    }
    cs /= static_cast<double>(c_step.size());
    us /= static_cast<double>(u_step.size());
    std::printf("mean step: constrained %.3f ms, unconstrained %.3f ms, +%.1f us (%+.2f %%)\n",
                cs * 1e3, us * 1e3, (cs - us) * 1e6, (cs / us - 1.0) * 100.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "constrained_step_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
