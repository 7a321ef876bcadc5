// `weft generate`: load a model folder and continue a prompt on the CPU, streaming tokens as
// they are made (text) or one JSON object per token (json); optionally constrained by a JSON
// Schema, a regular expression or an EBNF grammar (docs/grammars.md). The options and what
// they ask for are in generate_options.cpp.

#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "actors/device_backend.hpp"
#include "actors/pipeline_stages.hpp"
#include "kernels/cpu/quant/format.hpp"
#include "loaders/gguf_model.hpp"
#include "loaders/gguf_tokenizer.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/tokenizer_json.hpp"
#include "runtime/grammar/constraint_compiler.hpp"
#include "runtime/grammar/token_constraint.hpp"
#include "runtime/grammar/tokenizer_vocab.hpp"
#include "runtime/parallel/mpi_communicator.hpp"
#include "runtime/sampling/sequence_sampler.hpp"
#include "runtime/text/detokenizer.hpp"
#include "tools/weft/commands.hpp"
#include "tools/weft/generate_beam.hpp"
#include "tools/weft/generate_options.hpp"
#include "tools/weft/generate_seq2seq.hpp"
#include "tools/weft/load_progress.hpp"
#include "tools/weft/speculative_options.hpp"
#include "tools/weft/tensor_parallel.hpp"

namespace weft::cli {
namespace {

// Beam search runs through the engine (generate_beam.hpp).
int run_generate_beams(const GenerateOptions& o) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft generate: " << message << '\n';
    return 1;
  };
  if (o.tensor_parallel > 1) return fail("--beam-width: not with --tensor-parallel");
  if (o.pipeline.stages > 1 || o.pipeline.hybrid()) {
    return fail("--beam-width: not with --pipeline-parallel, --cpu-layers or a GPU budget");
  }
  auto format = response_format(o);
  if (!format) return fail(format.error().what());
  if (format->constrained()) {
    return fail("--beam-width: not with --json-schema, --regex, --grammar or --json-object");
  }
  auto device = actors::parse_device(o.device);
  if (!device) return fail(std::string("--device: ") + device.error().what());
  EngineConfig config;
  config.model_dir = o.model_dir;
  config.spec_file = o.spec_file;
  config.quantize = o.quantize;
  config.device = actors::device_name(*device);
  if (device->cuda) config.gpu_memory_fraction = 0.9;
  config.page_size = o.page_size;
  config.cpu_threads = o.threads;
  GenerateRequest request;
  if (o.prompt) {
    request.prompt = *o.prompt;
  } else {
    request.prompt_ids.assign(o.prompt_ids.begin(), o.prompt_ids.end());
  }
  request.sampling = sampling_params(o);
  return run_generate_beam(std::move(config), std::move(request), o.format);
}

// --speculate: the request runs through the Engine, whose scheduler plans draft slices.
int run_speculative_generate(const GenerateOptions& o) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft generate: " << message << '\n';
    return 1;
  };
  if (o.tensor_parallel > 1) return fail("--speculate: not with --tensor-parallel so far");
  if (o.pipeline.stages > 1 || o.pipeline.hybrid()) {
    return fail("--speculate: not with --pipeline-parallel, --cpu-layers or a GPU budget so far");
  }
  auto device = actors::parse_device(o.device);
  if (!device) return fail(std::string("--device: ") + device.error().what());
  auto format = response_format(o);
  if (!format) return fail(format.error().what());
  EngineConfig config;
  config.model_dir = o.model_dir;
  config.spec_file = o.spec_file;
  config.quantize = o.quantize;
  config.device = actors::device_name(*device);
  config.page_size = o.page_size;
  config.cpu_threads = o.threads;
  apply_speculative_options(o.speculative, config);
  GenerateRequest request;
  if (o.prompt) {
    request.prompt = *o.prompt;
  } else {
    request.prompt_ids.assign(o.prompt_ids.begin(), o.prompt_ids.end());
  }
  request.response_format = std::move(format.value());
  request.sampling = sampling_params(o);
  return generate_with_engine(std::move(config), std::move(request), o.format == "json");
}

// --kv-compress-rate: the request runs through the Engine, whose scheduler plans the
// compression after the prompt's prefill (docs/kv-compress.md).
int run_compressed_generate(const GenerateOptions& o) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft generate: " << message << '\n';
    return 1;
  };
  if (o.pipeline.stages > 1 || o.pipeline.hybrid()) {
    return fail(
        "--kv-compress-rate: not with --pipeline-parallel, --cpu-layers or a GPU budget so far");
  }
  auto device = actors::parse_device(o.device);
  if (!device) return fail(std::string("--device: ") + device.error().what());
  auto format = response_format(o);
  if (!format) return fail(format.error().what());
  EngineConfig config;
  config.model_dir = o.model_dir;
  config.spec_file = o.spec_file;
  config.quantize = o.quantize;
  config.device = actors::device_name(*device);
  config.page_size = o.page_size;
  config.cpu_threads = o.threads;
  config.kv_cache_dtype = o.kv_cache_dtype;
  config.kv_compress_rate = o.kv_compress.rate;
  config.kv_compress_window = o.kv_compress.window;
  config.kv_compress_heads = o.kv_compress.heads;
  // --tensor-parallel N: rank 0 runs the engine leading the group, the others follow its steps
  // (start_tensor_parallel returns their exit code when the leader stops).
  auto tp = start_tensor_parallel("generate", o.tensor_parallel, config);
  if (tp.exit_code) return *tp.exit_code;
  config.tensor_parallel = tp.group;
  GenerateRequest request;
  if (o.prompt) {
    request.prompt = *o.prompt;
  } else {
    request.prompt_ids.assign(o.prompt_ids.begin(), o.prompt_ids.end());
  }
  request.response_format = std::move(format.value());
  request.sampling = sampling_params(o);
  return generate_with_engine(std::move(config), std::move(request), o.format == "json");
}

int run_generate(const GenerateOptions& o) {
  if (o.beam_width > 1) return run_generate_beams(o);
  if (!o.speculative.speculate.empty()) return run_speculative_generate(o);
  if (o.kv_compress.rate > 0.0) return run_compressed_generate(o);
  // With --tensor-parallel N, N processes started by mpirun run this function together:
  // each loads its shard and runs every forward step (the all-reduces join them), rank 0
  // samples, prints, and broadcasts each token and whether to stop (docs/parallel.md).
  std::unique_ptr<parallel::Communicator> world;
  int rank = 0;
  auto fail = [&world, &rank](const std::string& message) {
    const bool group = world != nullptr && world->size() > 1;
    std::cerr << "weft generate: " << (group ? "rank " + std::to_string(rank) + ": " : "")
              << message << '\n';
    // A rank that stops alone would leave the others waiting in a collective.
    if (group) parallel::mpi_abort_world(1);
    return 1;
  };
  auto device = actors::parse_device(o.device);
  if (!device) return fail(std::string("--device: ") + device.error().what());
  auto kv_dtype = actors::resolve_kv_cache_dtype(o.kv_cache_dtype, *device);
  if (!kv_dtype) return fail(std::string("--kv-cache-dtype: ") + kv_dtype.error().what());
  const int stages = o.pipeline.stages;
  const int ranks = o.tensor_parallel * stages;
  if (ranks > 1 && o.pipeline.hybrid()) {
    return fail(
        "--cpu-layers and --gpu-memory-budget-mb run in one process, not with "
        "--tensor-parallel or --pipeline-parallel");
  }
  if (ranks > 1) {
    auto opened = parallel::mpi_world();
    if (!opened) {
      return fail(std::string(stages > 1 ? "--pipeline-parallel: " : "--tensor-parallel: ") +
                  opened.error().what());
    }
    world = std::move(opened.value());
    rank = world->rank();
    if (world->size() != ranks) {
      const int started = world->size();
      if (rank != 0) return 1;  // every rank sees this; rank 0 says it
      world.reset();
      return fail(wrong_process_count("generate", o.tensor_parallel, stages, started));
    }
    // On GPUs, each rank takes its local rank's.
    device = actors::tensor_parallel_device(*device, rank);
    if (!device) return fail(std::string("--device: ") + device.error().what());
  }
  LoadOptions load_options;
  load_options.spec_file = o.spec_file;
  if (!o.quantize.empty()) load_options.quantize = quant::parse_quant_type(o.quantize).value();
  load_options.tensor_parallel_size = o.tensor_parallel;
  load_options.tensor_parallel_rank = rank % o.tensor_parallel;
  load_options.pipeline_parallel_size = stages;
  load_options.pipeline_stage = rank / o.tensor_parallel;
  load_options.allow_seq2seq = !world;
  auto loaded = load_model(o.model_dir, load_options);
  if (world) {
    // Ranks agree on whether any failed to load, so an error every rank meets alike (a bad
    // folder, a shape the group does not divide) is said once and nobody is left waiting.
    float failed = loaded ? 0.0f : 1.0f;
    if (auto ok = world->all_reduce_sum(std::span<float>(&failed, 1)); !ok) {
      return fail(ok.error().what());
    }
    if (failed > 0) {
      const bool everyone = static_cast<int>(failed) == world->size();
      if (!loaded && (rank == 0 || !everyone)) {
        std::cerr << "weft generate: " << (everyone ? "" : "rank " + std::to_string(rank) + ": ")
                  << loaded.error().what() << '\n';
      }
      return 1;
    }
  }
  if (!loaded) return fail(loaded.error().what());
  if (loaded->seq2seq) {
    // Encoder-decoder models (T5, M2M100): through the engine (generate_seq2seq.hpp).
    auto format = response_format(o);
    if (!format) return fail(format.error().what());
    if (format->constrained()) {
      return fail(
          "constrained output (--json-schema, --regex, --grammar, --json-object) is not "
          "implemented for encoder-decoder models");
    }
    Seq2SeqGenerateOptions s;
    s.model_dir = o.model_dir;
    s.spec_file = o.spec_file;
    s.prompt = o.prompt;
    s.prompt_ids = o.prompt_ids;
    s.decoder_prefix_ids = o.decoder_prefix_ids;
    s.max_tokens = o.max_tokens;
    s.sampling = sampling_params(o);
    s.json = o.format == "json";
    s.threads = o.threads;
    s.page_size = o.page_size;
    s.kv_cache_dtype = o.kv_cache_dtype;
    s.device = o.device;
    return run_seq2seq_generate(std::move(loaded.value()), s);
  }
  if (!o.decoder_prefix_ids.empty()) {
    return fail("--decoder-prefix-ids is for encoder-decoder models; " + o.model_dir +
                " holds a decoder-only one (put the tokens in the prompt)");
  }
  const auto& model = loaded->model;
  const int vocab = model.spec().vocab_size;

  std::shared_ptr<const text::Tokenizer> tokenizer;
  // A GGUF file carries its tokenizer in its metadata; a folder has tokenizer.json.
  const bool gguf = is_gguf_file(o.model_dir);
  const auto tokenizer_json = gguf ? std::filesystem::path(o.model_dir)
                                   : std::filesystem::path(o.model_dir) / "tokenizer.json";
  std::error_code ec;
  if (std::filesystem::exists(tokenizer_json, ec)) {
    auto t = loaders::load_tokenizer(tokenizer_json);
    if (!t) return fail(t.error().what());
    tokenizer = t->tokenizer;
  }
  // A constraint is compiled before anything is generated: its errors come first.
  auto format = response_format(o);
  if (!format) return fail(format.error().what());
  std::optional<grammar::TokenConstraint> constraint;
  if (format->constrained()) {
    const char* option = format->type == ResponseFormat::Type::kJsonSchema ? "--json-schema"
                         : format->type == ResponseFormat::Type::kGrammar  ? "--grammar"
                         : format->type == ResponseFormat::Type::kRegex    ? "--regex"
                                                                           : "--json-object";
    if (!std::filesystem::exists(tokenizer_json, ec)) {
      return fail(std::string(option) + " needs the model's tokenizer.json");
    }
    const auto& eos_ids = loaded->generation.eos_token_ids;
    grammar::ConstraintCompiler compiler(
        [&tokenizer_json]() -> Result<grammar::TokenizerVocab> {
          auto text = read_tokenizer_json_text(tokenizer_json);
          if (!text) return text.error();
          return grammar::vocab_from_tokenizer_json(*text);
        },
        std::vector<std::int32_t>(eos_ids.begin(), eos_ids.end()));
    auto compiled = compiler.compile(*format);
    if (!compiled) return fail(std::string(option) + ": " + compiled.error().what());
    constraint.emplace(std::move(compiled.value()), vocab);
  }
  std::vector<int> prompt = o.prompt_ids;
  if (o.prompt) {
    if (!tokenizer) return fail(o.model_dir + " has no tokenizer.json; use --prompt-ids");
    auto ids = tokenizer->encode(*o.prompt, /*add_special_tokens=*/true);
    if (!ids) return fail(ids.error().what());
    prompt.assign(ids->begin(), ids->end());
  }
  if (prompt.empty()) return fail("the prompt is empty; give --prompt or --prompt-ids");
  for (int id : prompt) {
    if (id < 0 || id >= vocab) {
      return fail("prompt token id " + std::to_string(id) +
                  " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }

  const std::int64_t capacity =
      static_cast<std::int64_t>(prompt.size()) + std::max(o.max_tokens, 0);
  auto layout = model.kv_layout(o.page_size);
  layout.dtype = *kv_dtype;
  const std::int64_t pages = std::max<std::int64_t>(1, (capacity + o.page_size - 1) / o.page_size);
  // The whole KV cache is allocated up front; refuse a size that cannot be, instead of
  // failing inside the allocator.
  const double kv_bytes = static_cast<double>(pages) * actors::kv_page_bytes(*device, layout);
  if (kv_bytes > 64.0 * (1ull << 30)) {
    return fail("--max-tokens " + std::to_string(o.max_tokens) + " needs a " +
                std::to_string(static_cast<long long>(kv_bytes / (1 << 20))) +
                " MiB KV cache; at most 64 GiB is allowed");
  }
  std::unique_ptr<model::ForwardBackend> backend;
  try {
    actors::StageOptions stage_options;
    stage_options.num_pages = static_cast<int>(pages);
    stage_options.cpu_threads = o.threads;
    stage_options.max_tokens_per_step = static_cast<int>(prompt.size());
    if (device->cuda && rank == 0) {
      stage_options.on_progress = upload_progress(actors::device_name(*device));
    }
    if (world && stages > 1) {
      // Only rank 0's forward returns logits: the last stage sends them there to be sampled.
      auto made = actors::make_pipeline_rank_backend(
          model, *device, layout, stage_options, *world,
          parallel::pipeline_place(rank, o.tensor_parallel, stages),
          o.pipeline.micro_batch_count());
      if (!made) return fail(made.error().what());
      backend = std::move(made.value());
    } else if (world) {
      auto made = actors::make_tensor_parallel_shard(
          model, *device, layout, static_cast<int>(pages), o.threads,
          static_cast<int>(prompt.size()), 0.9, *world, stage_options.on_progress);
      if (!made) return fail(made.error().what());
      backend = std::move(made.value());
    } else if (o.pipeline.hybrid()) {
      auto choice = choose_cpu_layers(o.pipeline, model, layout, *device);
      if (!choice) return fail(choice.error().what());
      auto made = choice->cpu_layers == 0
                      ? actors::make_forward_backend(
                            model, *device, layout, static_cast<int>(pages), o.threads,
                            static_cast<int>(prompt.size()), 0.9, stage_options.on_progress)
                      : actors::make_gpu_cpu_hybrid(model, *device, layout, stage_options,
                                                    choice->cpu_layers);
      if (!made) return fail(made.error().what());
      backend = std::move(made.value());
    } else {
      auto made = actors::make_forward_backend(
          model, *device, layout, static_cast<int>(pages), o.threads,
          static_cast<int>(prompt.size()), 0.9,
          device->cuda ? upload_progress(actors::device_name(*device)) : nullptr);
      if (!made) return fail(made.error().what());
      backend = std::move(made.value());
    }
  } catch (const std::bad_alloc&) {
    return fail("not enough memory for a KV cache of " + std::to_string(capacity) + " tokens");
  }
  // The backend's pool is this sequence's alone: pages 0, 1, 2, ... in order.
  model::SequenceSlice seq{0, static_cast<int>(prompt.size()), {}, false};
  for (std::int64_t p = 0; p < pages; ++p)
    seq.page_table.push_back(static_cast<std::int32_t>(p));
  model::StepBatch step;
  step.tokens.assign(prompt.begin(), prompt.end());
  for (std::size_t i = 0; i < prompt.size(); ++i)
    step.positions.push_back(static_cast<int>(i));
  step.sequences.push_back(seq);

  // The engine's sampler (runtime/sampling): the same seed gives the same tokens here and
  // through the engine.
  sampling::SamplingParams params = sampling_params(o);
  if (auto ok = sampling::validate(params, vocab); !ok) return fail(ok.error().what());
  const std::vector<std::int32_t> prompt_ids(prompt.begin(), prompt.end());
  sampling::SequenceSampler sampler(params, prompt_ids, o.seed);
  // Text leaves in valid UTF-8 pieces that add up to the full decode.
  std::optional<text::IncrementalDetokenizer> detokenizer;
  if (tokenizer) detokenizer.emplace(tokenizer, /*skip_special_tokens=*/true);
  const bool json = o.format == "json";
  const auto& eos = loaded->generation.eos_token_ids;
  std::vector<float> logits;
  std::string finish = "length";
  int generated = 0;
  using clock = std::chrono::steady_clock;
  double prefill_s = 0, decode_s = 0;
  while (generated < o.max_tokens) {
    const auto start = clock::now();
    auto ok = backend->forward(step, logits);
    if (!ok) return fail(ok.error().what());
    (generated == 0 ? prefill_s : decode_s) +=
        std::chrono::duration<double>(clock::now() - start).count();
    ++generated;
    // The token rank 0 chose, and 1 when generation stops there.
    std::int32_t next[2] = {0, 0};
    if (rank == 0) {
      const std::uint32_t* allowed = constraint ? constraint->next_mask().data() : nullptr;
      auto sampled = sampler.try_sample(
          std::span<float>(logits.data(), static_cast<std::size_t>(vocab)), allowed);
      if (!sampled) return fail(sampled.error().what());
      const sampling::SampledToken& choice = sampled.value();
      bool stop = !o.ignore_eos && std::find(eos.begin(), eos.end(), choice.id) != eos.end();
      if (constraint) {
        // The output is complete when the grammar has matched and allows nothing more.
        const auto verdict = constraint->accept(choice.id);
        if (verdict == grammar::TokenConstraint::Verdict::kRejected && constraint->error()) {
          return fail(std::string("constraint: ") + constraint->error()->what());
        }
        if (verdict == grammar::TokenConstraint::Verdict::kRejected) {
          return fail("internal: the sampled token " + std::to_string(choice.id) +
                      " is not allowed by the constraint");
        }
        stop = stop || verdict == grammar::TokenConstraint::Verdict::kComplete;
      }
      const bool last = stop || generated == o.max_tokens;
      std::string piece;
      if (detokenizer) {
        auto delta = detokenizer->push(static_cast<std::uint32_t>(choice.id));
        if (!delta) return fail(delta.error().what());
        piece = std::move(delta.value());
        if (last) {
          auto rest = detokenizer->finish();
          if (!rest) return fail(rest.error().what());
          piece += rest.value();
        }
      }
      if (json) {
        boost::json::object event{{"id", choice.id}};
        if (detokenizer) event["text"] = piece;
        event["logprob"] = choice.logprob;
        if (o.top_logprobs > 0) {
          boost::json::array top;
          for (const auto& t : choice.top)
            top.push_back({{"id", t.id}, {"logprob", t.logprob}});
          event["top_logprobs"] = std::move(top);
        }
        std::cout << boost::json::serialize(event) << '\n' << std::flush;
      } else if (detokenizer) {
        std::cout << piece << std::flush;
      } else {
        std::cout << (generated > 1 ? " " : "") << choice.id << std::flush;
      }
      next[0] = choice.id;
      next[1] = stop ? 1 : 0;
    }
    if (world) {
      auto sent = world->broadcast(std::as_writable_bytes(std::span<std::int32_t>(next)), 0);
      if (!sent) return fail(sent.error().what());
    }
    if (next[1] != 0) {
      finish = "stop";
      break;
    }
    const int pos = static_cast<int>(prompt.size()) + generated - 1;
    step.tokens = {next[0]};
    step.positions = {pos};
    step.sequences[0].token_count = 1;
  }
  if (rank != 0) return 0;
  if (json) {
    boost::json::object done{{"finish_reason", finish},
                             {"prompt_tokens", prompt.size()},
                             {"completion_tokens", generated},
                             {"prefill_seconds", prefill_s},
                             {"decode_seconds", decode_s}};
    std::cout << boost::json::serialize(done) << '\n';
  } else {
    std::cout << '\n';
  }
  return 0;
}

}  // namespace

void add_generate_command(CLI::App& app, int& exit_code) {
  auto* cmd = app.add_subcommand(
      "generate",
      "Continue a prompt with a model folder (safetensors or pytorch_model.bin + config.json) on "
      "the CPU or a GPU.");
  auto opts = std::make_shared<GenerateOptions>();
  add_generate_options(cmd, *opts);
  cmd->callback([opts, &exit_code] { exit_code = run_generate(*opts); });
}

}  // namespace weft::cli
