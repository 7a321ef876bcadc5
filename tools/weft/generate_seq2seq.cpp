#include "tools/weft/generate_seq2seq.hpp"

#include <algorithm>
#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>

#include "actors/device_backend.hpp"
#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace weft::cli {

int run_seq2seq_generate(LoadedModel loaded, const Seq2SeqGenerateOptions& o) {
  namespace asio = boost::asio;
  auto fail = [](const std::string& message) {
    std::cerr << "weft generate: " << message << '\n';
    return 1;
  };
  const int vocab = loaded.seq2seq->spec().vocab_size;
  std::error_code ec;
  const bool has_tokenizer =
      std::filesystem::exists(std::filesystem::path(o.model_dir) / "tokenizer.json", ec);
  if (o.prompt && !has_tokenizer) {
    return fail(o.model_dir + " has no tokenizer.json; use --prompt-ids");
  }
  if (!o.prompt && o.prompt_ids.empty()) {
    return fail("the prompt is empty; give --prompt or --prompt-ids");
  }
  for (const int id : o.prompt_ids) {
    if (id < 0 || id >= vocab) {
      return fail("prompt token id " + std::to_string(id) +
                  " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  for (const int id : o.decoder_prefix_ids) {
    if (id < 0 || id >= vocab) {
      return fail("--decoder-prefix-ids: token id " + std::to_string(id) +
                  " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  // A pool for this one request: its encoder output's pages and its decoder positions (a text
  // prompt's length is not known before the engine encodes it: 4096 tokens are allowed for).
  auto device = actors::parse_device(o.device);
  if (!device) return fail(std::string("--device: ") + device.error().what());
  auto kv_dtype = actors::resolve_kv_cache_dtype(o.kv_cache_dtype, *device);
  if (!kv_dtype) return fail(std::string("--kv-cache-dtype: ") + kv_dtype.error().what());
  model::KvLayout layout = loaded.seq2seq->kv_layout(o.page_size);
  layout.dtype = *kv_dtype;
  const int max_tokens = std::max(1, o.max_tokens);
  const auto pages_for = [&](std::int64_t tokens) {
    return (tokens + o.page_size - 1) / o.page_size;
  };
  const std::int64_t source = o.prompt ? 4096 : static_cast<std::int64_t>(o.prompt_ids.size());
  const std::int64_t decoder =
      1 + static_cast<std::int64_t>(o.decoder_prefix_ids.size()) + max_tokens;
  const std::int64_t pages = pages_for(source) + pages_for(decoder) + 1;
  const double bytes = static_cast<double>(pages) * static_cast<double>(layout.bytes_per_page());
  if (bytes > 64.0 * (1ull << 30)) {
    return fail("--max-tokens " + std::to_string(o.max_tokens) +
                " needs a KV cache over 64 GiB; at most 64 GiB is allowed");
  }
  loaded = LoadedModel{};  // the engine loads its own

  EngineConfig config;
  config.model_dir = o.model_dir;
  config.spec_file = o.spec_file;
  config.device = o.device;
  // On a GPU too the pool is sized for this request, not from the device's free memory.
  config.gpu_memory_fraction = 0.0;
  config.page_size = o.page_size;
  config.cpu_threads = o.threads;
  config.kv_cache_dtype = o.kv_cache_dtype;
  config.kv_budget_bytes = static_cast<std::int64_t>(bytes);
  GenerateRequest request;
  if (o.prompt) {
    request.prompt = *o.prompt;
  } else {
    request.prompt_ids.assign(o.prompt_ids.begin(), o.prompt_ids.end());
  }
  request.decoder_prefix_ids.assign(o.decoder_prefix_ids.begin(), o.decoder_prefix_ids.end());
  request.sampling = o.sampling;
  request.sampling.max_tokens = max_tokens;

  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  std::optional<Engine> engine;
  try {
    engine.emplace(runtime.executor(), std::move(config));
  } catch (const Error& e) {
    return fail(e.what());
  }
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  double first_token_s = 0;
  int code = 0;
  int printed = 0;
  Event final_event;
  try {
    auto stream = engine->submit(std::move(request), asio::use_future).get();
    for (;;) {
      Event e = stream->next(asio::use_future).get();
      if (e.kind == Event::Kind::kFinal) {
        final_event = std::move(e);
        break;
      }
      if (printed == 0) first_token_s = std::chrono::duration<double>(clock::now() - start).count();
      if (o.json) {
        // One object per token; a delta's text goes with its last token.
        for (std::size_t k = 0; k < e.logprobs.size(); ++k) {
          const TokenLogprobs& t = e.logprobs[k];
          boost::json::object event{{"id", t.id}};
          if (has_tokenizer) event["text"] = k + 1 == e.logprobs.size() ? e.text : std::string();
          event["logprob"] = t.logprob;
          if (o.sampling.logprobs > 0) {
            boost::json::array top;
            for (const auto& alt : t.top)
              top.push_back({{"id", alt.id}, {"logprob", alt.logprob}});
            event["top_logprobs"] = std::move(top);
          }
          std::cout << boost::json::serialize(event) << '\n' << std::flush;
        }
      } else if (has_tokenizer) {
        std::cout << e.text << std::flush;
      } else {
        int shown = printed;
        for (const std::int32_t id : e.token_ids)
          std::cout << (shown++ > 0 ? " " : "") << id;
        std::cout << std::flush;
      }
      printed += static_cast<int>(e.token_ids.size());
    }
  } catch (const std::exception& e) {
    std::cerr << "weft generate: " << e.what() << '\n';
    code = 1;
  }
  const double seconds = std::chrono::duration<double>(clock::now() - start).count();
  engine->shutdown(asio::use_future).get();
  if (code != 0) return code;
  if (final_event.finish_reason == FinishReason::kError) return fail(final_event.error);
  if (o.json) {
    boost::json::object done{{"finish_reason", to_string(final_event.finish_reason)},
                             {"prompt_tokens", final_event.usage.prompt_tokens},
                             {"completion_tokens", final_event.usage.completion_tokens},
                             {"first_token_seconds", first_token_s},
                             {"seconds", seconds}};
    std::cout << boost::json::serialize(done) << '\n';
  } else {
    std::cout << '\n';
  }
  return 0;
}

}  // namespace weft::cli
