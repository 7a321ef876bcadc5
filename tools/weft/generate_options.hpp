#pragma once
// `weft generate`'s options: what the command line sets, the response format and sampling
// parameters they ask for, and the registration of every option (cmd_generate.cpp runs them).

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/sampling/sampling_params.hpp"
#include "tools/weft/kv_compress_option.hpp"
#include "tools/weft/pipeline_options.hpp"
#include "tools/weft/speculative_options.hpp"
#include "weft/error.hpp"
#include "weft/response_format.hpp"

namespace weft::cli {

struct GenerateOptions {
  std::string model_dir;
  std::string quantize;  // --quantize: a block format name, empty for none
  std::string spec_file;
  std::optional<std::string> prompt;
  std::vector<int> prompt_ids;
  std::vector<int> decoder_prefix_ids;  // encoder-decoder models: forced first decoder tokens
  int max_tokens = 64;
  float temperature = 0.0f;
  std::uint64_t seed = 0;
  int top_logprobs = 0;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float typical_p = 1.0f;
  float tfs_z = 1.0f;
  int mirostat = 0;
  float mirostat_tau = 5.0f;
  float mirostat_eta = 0.1f;
  float repetition_penalty = 1.0f;
  std::string fsd = "off";
  int fsd_k = 6;
  float fsd_alpha = 0.5f;
  int fsd_n = 3;
  float fsd_beta = 0.9f;
  int fsd_pool_size = 50;
  int fsd_random_steps = 10;
  float fsd_random_prob = 0.5f;
  int beam_width = 1;
  float length_penalty = 1.0f;
  int n_best = 1;
  std::string device = "auto";
  std::string kv_cache_dtype = "auto";
  KvCompressOptions kv_compress;
  std::string format = "text";
  bool ignore_eos = false;
  unsigned threads = 0;
  int page_size = 16;
  int tensor_parallel = 1;
  PipelineOptions pipeline;
  std::string json_schema_file;
  std::string regex;
  std::string grammar_file;
  bool json_object = false;
  bool flexible_whitespace = false;
  SpeculativeOptions speculative;
};

// The response format the options ask for; its error names the option.
Result<ResponseFormat> response_format(const GenerateOptions& o);

// The options' sampling parameters (validated by the caller).
sampling::SamplingParams sampling_params(const GenerateOptions& o);

// Registers generate's options on `cmd` (each with its --help), bound to `opts`.
void add_generate_options(CLI::App* cmd, GenerateOptions& opts);

}  // namespace weft::cli
