#include "tools/weft/generate_options.hpp"

#include <algorithm>
#include <fstream>
#include <memory>
#include <sstream>

#include "tools/weft/commands.hpp"
#include "tools/weft/default_model.hpp"
#include "tools/weft/quantize_option.hpp"

namespace weft::cli {
namespace {

Result<std::string> read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error(ErrorCode::kIo, path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

Result<ResponseFormat> response_format(const GenerateOptions& o) {
  ResponseFormat f;
  f.flexible_whitespace = o.flexible_whitespace;
  if (!o.json_schema_file.empty()) {
    auto text = read_text(o.json_schema_file);
    if (!text)
      return Error(text.error().code(), "--json-schema " + std::string(text.error().what()));
    f.type = ResponseFormat::Type::kJsonSchema;
    f.source = std::move(text.value());
  } else if (!o.grammar_file.empty()) {
    auto text = read_text(o.grammar_file);
    if (!text) return Error(text.error().code(), "--grammar " + std::string(text.error().what()));
    f.type = ResponseFormat::Type::kGrammar;
    f.source = std::move(text.value());
  } else if (!o.regex.empty()) {
    f.type = ResponseFormat::Type::kRegex;
    f.source = o.regex;
  } else if (o.json_object) {
    f.type = ResponseFormat::Type::kJsonObject;
  }
  return f;
}

sampling::SamplingParams sampling_params(const GenerateOptions& o) {
  sampling::SamplingParams params;
  params.temperature = o.temperature;
  params.top_k = o.top_k;
  params.top_p = o.top_p;
  params.min_p = o.min_p;
  params.typical_p = o.typical_p;
  params.tfs_z = o.tfs_z;
  params.mirostat = o.mirostat;
  params.mirostat_tau = o.mirostat_tau;
  params.mirostat_eta = o.mirostat_eta;
  params.repetition_penalty = o.repetition_penalty;
  params.fsd = o.fsd == "fsd"          ? sampling::Fsd::kFsd
               : o.fsd == "random_fsd" ? sampling::Fsd::kRandomized
                                       : sampling::Fsd::kOff;
  params.fsd_k = o.fsd_k;
  params.fsd_alpha = o.fsd_alpha;
  params.fsd_n = o.fsd_n;
  params.fsd_beta = o.fsd_beta;
  params.fsd_pool_size = o.fsd_pool_size;
  params.fsd_random_steps = o.fsd_random_steps;
  params.fsd_random_prob = o.fsd_random_prob;
  params.beam_width = o.beam_width;
  params.length_penalty = o.length_penalty;
  params.n = o.n_best;
  params.logprobs = o.top_logprobs;
  params.max_tokens = std::max(1, o.max_tokens);
  params.seed = o.seed;
  params.ignore_eos = o.ignore_eos;
  return params;
}

void add_generate_options(CLI::App* cmd, GenerateOptions& opts) {
  add_model_option(cmd, opts.model_dir);
  add_quantize_option(cmd, opts.quantize);
  add_kv_compress_options(cmd, opts.kv_compress);
  cmd->add_option("--spec", opts.spec_file,
                  "model specification file (default: chosen by config.json's architectures, "
                  "then model_type, "
                  "from config/models/)");
  auto* text = cmd->add_option("--prompt", opts.prompt,
                               "prompt text, encoded with the folder's tokenizer.json");
  auto* ids = cmd->add_option("--prompt-ids", opts.prompt_ids, "prompt token ids, e.g. 1,2,3")
                  ->delimiter(',');
  text->excludes(ids);
  cmd->add_option("--decoder-prefix-ids", opts.decoder_prefix_ids,
                  "encoder-decoder models: token ids the decoder takes after its start token "
                  "before generating, e.g. NLLB's target language code (docs/seq2seq.md)")
      ->delimiter(',');
  cmd->add_option("--max-tokens", opts.max_tokens, "tokens to generate at most")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--temperature", opts.temperature, "0 picks the most likely token (greedy)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", opts.seed, "random seed for sampling")->capture_default_str();
  cmd->add_option("--top-logprobs", opts.top_logprobs,
                  "report this many most likely tokens per step (json format)")
      ->capture_default_str()
      ->check(CLI::Range(0, 20));
  cmd->add_option("--top-k", opts.top_k, "sample among the k most likely tokens (0: all)")
      ->capture_default_str();
  cmd->add_option("--top-p", opts.top_p, "nucleus sampling mass, in (0, 1]")->capture_default_str();
  cmd->add_option("--min-p", opts.min_p, "drop tokens below min_p times the top probability")
      ->capture_default_str();
  cmd->add_option("--typical-p", opts.typical_p, "locally typical sampling mass, in (0, 1]; 1: off")
      ->capture_default_str();
  cmd->add_option("--tfs-z", opts.tfs_z, "tail-free sampling threshold, in (0, 1]; 1: off")
      ->capture_default_str();
  cmd->add_option("--mirostat", opts.mirostat,
                  "mirostat version: 0 off, 1 or 2 (not with top-k/top-p/min-p/typical-p/tfs-z)")
      ->capture_default_str();
  cmd->add_option("--mirostat-tau", opts.mirostat_tau,
                  "mirostat's target surprise in bits, in (0, 100]")
      ->capture_default_str();
  cmd->add_option("--mirostat-eta", opts.mirostat_eta, "mirostat's learning rate, in (0, 1]")
      ->capture_default_str();
  cmd->add_option("--repetition-penalty", opts.repetition_penalty,
                  "penalize tokens already in the prompt or output (> 0; 1: off)")
      ->capture_default_str();
  cmd->add_option("--fsd", opts.fsd,
                  "Inferflow's FSD decoding (docs/sampling.md#fsd): off, fsd, or random_fsd "
                  "(sampling at some of the first --fsd-random-steps tokens)")
      ->capture_default_str()
      ->check(CLI::IsMember({"off", "fsd", "random_fsd"}));
  cmd->add_option("--fsd-k", opts.fsd_k, "FSD: the most likely tokens scored")
      ->capture_default_str();
  cmd->add_option("--fsd-alpha", opts.fsd_alpha, "FSD: the anti-LM's weight, in [0, 1]")
      ->capture_default_str();
  cmd->add_option("--fsd-n", opts.fsd_n, "FSD: the anti-LM's n-gram order, in [1, 8]")
      ->capture_default_str();
  cmd->add_option("--fsd-beta", opts.fsd_beta, "FSD: the anti-LM's back-off weight, in [0, 1]")
      ->capture_default_str();
  cmd->add_option("--fsd-pool-size", opts.fsd_pool_size,
                  "FSD: the most likely tokens its probabilities are normalised over")
      ->capture_default_str();
  cmd->add_option("--fsd-random-steps", opts.fsd_random_steps,
                  "random_fsd: the first output tokens that may be sampled instead")
      ->capture_default_str();
  cmd->add_option("--fsd-random-prob", opts.fsd_random_prob,
                  "random_fsd: the chance each of them is sampled, in [0, 1]")
      ->capture_default_str();
  cmd->add_option("--beam-width", opts.beam_width,
                  "beam search with this many beams (1: off; runs through the engine, "
                  "docs/sampling.md#beam-search)")
      ->capture_default_str()
      ->check(CLI::Range(1, 16));
  cmd->add_option("--length-penalty", opts.length_penalty,
                  "beam search: score = sum of logprobs / length^length_penalty")
      ->capture_default_str();
  cmd->add_option("--n-best", opts.n_best,
                  "beam search: print this many best beams, in [1, --beam-width]")
      ->capture_default_str();
  cmd->add_option("--device", opts.device,
                  "where to run: auto (GPU 0 when one is visible, else cpu), cpu, cuda or cuda:N "
                  "(bf16 on the GPU)")
      ->capture_default_str();
  cmd->add_option("--format", opts.format,
                  "text: stream the continuation; json: one object per token, then a summary")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  cmd->add_flag("--ignore-eos", opts.ignore_eos,
                "keep going past the eos token of generation_config.json");
  auto* schema = cmd->add_option("--json-schema", opts.json_schema_file,
                                 "constrain the output to JSON valid under this JSON Schema file");
  auto* regex = cmd->add_option("--regex", opts.regex,
                                "constrain the whole output to match this regular expression");
  auto* grammar_opt = cmd->add_option(
      "--grammar", opts.grammar_file,
      "constrain the output to this EBNF grammar file (docs/grammars.md; rule root)");
  auto* object =
      cmd->add_flag("--json-object", opts.json_object, "constrain the output to any JSON object");
  schema->excludes(regex)->excludes(grammar_opt)->excludes(object);
  regex->excludes(grammar_opt)->excludes(object);
  grammar_opt->excludes(object);
  cmd->add_flag("--flexible-whitespace", opts.flexible_whitespace,
                "with --json-schema/--json-object: allow whitespace between JSON tokens");
  cmd->add_option("--threads", opts.threads, "CPU threads (0: one per core)")
      ->capture_default_str();
  cmd->add_option("--page-size", opts.page_size, "KV cache page size in tokens")
      ->capture_default_str()
      ->check(CLI::Range(1, 4096));
  cmd->add_option("--kv-cache-dtype", opts.kv_cache_dtype, kKvCacheDtypeHelp)
      ->capture_default_str();
  cmd->add_option("--tensor-parallel", opts.tensor_parallel,
                  "split the model over N processes started by mpirun -np N (Megatron layout: "
                  "heads and MLP split per rank; on the CPU over MPI, on GPUs over NCCL with one "
                  "GPU per rank, the local rank's; docs/parallel.md)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  add_pipeline_options(cmd, opts.pipeline);
  add_speculative_options(cmd, opts.speculative);
}

}  // namespace weft::cli
