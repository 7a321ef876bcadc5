#include "tools/weft/speculative_options.hpp"

#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <iostream>
#include <optional>

#include "weft/runtime.hpp"

namespace weft::cli {

void add_speculative_options(CLI::App* cmd, SpeculativeOptions& o) {
  auto* speculate = cmd->add_option(
      "--speculate", o.speculate,
      "speculative decoding (docs/speculative.md): prompt-lookup (n-gram lookup in the "
      "request's own tokens, no model) or draft (--draft-model); the output is the same as "
      "without (greedy: token for token; sampled: the same distribution)");
  speculate->check(CLI::IsMember({"prompt-lookup", "draft"}));
  cmd->add_option("--draft-model", o.draft_model,
                  "with --speculate draft: a model folder with the same tokenizer, run on the "
                  "model's device (see --draft-device)")
      ->needs(speculate);
  cmd->add_option("--draft-device", o.draft_device,
                  "where the draft model runs: auto (the model's device: with --device cuda, "
                  "the same GPU, batched, with CUDA graphs) or cpu")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu"}));
  cmd->add_option("--spec-tokens", o.spec_tokens,
                  "speculative depth: draft tokens on one path of the tree")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  cmd->add_option("--spec-width", o.spec_width,
                  "token tree width (1: a chain); ALiBi models use chains")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  cmd->add_option("--spec-step-budget", o.spec_step_budget,
                  "draft tokens one step verifies over all its sequences; each sequence gets "
                  "budget / batch (speculation turns down, then off, as the batch grows)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
}

void apply_speculative_options(const SpeculativeOptions& o, EngineConfig& config) {
  config.speculate = o.speculate;
  config.draft_model_dir = o.draft_model;
  config.draft_device = o.draft_device;
  config.spec_tokens = o.spec_tokens;
  config.spec_width = o.spec_width;
  config.spec_step_budget = o.spec_step_budget;
}

int generate_with_engine(EngineConfig config, GenerateRequest request, bool json) {
  namespace asio = boost::asio;
  const bool speculative = !config.speculate.empty();
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  std::optional<Engine> engine;
  try {
    engine.emplace(runtime.executor(), std::move(config));
  } catch (const Error& e) {
    std::cerr << "weft generate: " << e.what() << '\n';
    return 1;
  }
  const auto start = std::chrono::steady_clock::now();
  int code = 0;
  Event final_event;
  try {
    auto stream = engine->submit(std::move(request), asio::use_future).get();
    for (;;) {
      Event e = stream->next(asio::use_future).get();
      if (e.kind == Event::Kind::kFinal) {
        final_event = std::move(e);
        break;
      }
      if (json) {
        boost::json::array ids(e.token_ids.begin(), e.token_ids.end());
        std::cout << boost::json::serialize(
                         boost::json::object{{"token_ids", ids}, {"text", e.text}})
                  << '\n';
      } else {
        std::cout << e.text << std::flush;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "weft generate: " << e.what() << '\n';
    code = 1;
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const EngineMetrics m = engine->metrics(asio::use_future).get();
  engine->shutdown(asio::use_future).get();
  if (code != 0) return code;
  if (final_event.finish_reason == FinishReason::kError) {
    std::cerr << "weft generate: " << final_event.error << '\n';
    return 1;
  }
  const double acceptance = m.speculative_verifications == 0
                                ? 0.0
                                : 1.0 + static_cast<double>(m.speculative_accepted_tokens) /
                                            static_cast<double>(m.speculative_verifications);
  if (json) {
    boost::json::object done{{"finish_reason", to_string(final_event.finish_reason)},
                             {"prompt_tokens", final_event.usage.prompt_tokens},
                             {"completion_tokens", final_event.usage.completion_tokens},
                             {"seconds", seconds},
                             {"steps", m.steps},
                             {"speculative_verifications", m.speculative_verifications},
                             {"speculative_draft_tokens", m.speculative_draft_tokens},
                             {"speculative_accepted_tokens", m.speculative_accepted_tokens},
                             {"mean_acceptance_length", acceptance},
                             {"kv_compressions", m.kv_compressions},
                             {"kv_compressed_pages", m.kv_compressed_pages}};
    std::cout << boost::json::serialize(done) << '\n';
  } else {
    std::cout << '\n';
    if (!speculative) {  // --kv-compress-rate (docs/kv-compress.md)
      std::fprintf(stderr, "kv-compress: %d tokens in %llu steps, %.2f s; %llu KV pages freed\n",
                   final_event.usage.completion_tokens, static_cast<unsigned long long>(m.steps),
                   seconds, static_cast<unsigned long long>(m.kv_compressed_pages));
      return 0;
    }
    std::fprintf(stderr,
                 "speculative: %d tokens in %llu steps, %.2f s; %llu verifications, %llu of "
                 "%llu draft tokens accepted, mean acceptance length %.2f\n",
                 final_event.usage.completion_tokens, static_cast<unsigned long long>(m.steps),
                 seconds, static_cast<unsigned long long>(m.speculative_verifications),
                 static_cast<unsigned long long>(m.speculative_accepted_tokens),
                 static_cast<unsigned long long>(m.speculative_draft_tokens), acceptance);
  }
  return 0;
}

}  // namespace weft::cli
