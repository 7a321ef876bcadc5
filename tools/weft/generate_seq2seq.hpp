#pragma once
// `weft generate` on an encoder-decoder model folder (T5, M2M100/NLLB): the prompt is the
// encoder's input; the decoder starts from decoder_start_token_id and continues greedily or by
// sampling. The request runs through the Engine, as `weft serve` and `weft bench` run these
// models, on the CPU or a GPU (docs/seq2seq.md).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "loaders/model_loader.hpp"
#include "runtime/sampling/sampling_params.hpp"

namespace weft::cli {

struct Seq2SeqGenerateOptions {
  std::string model_dir;
  std::string spec_file;
  std::optional<std::string> prompt;  // encoded with the folder's tokenizer.json
  std::vector<int> prompt_ids;        // or given as ids
  // Forced decoder tokens after the start token (NLLB's target language code, which
  // transformers forces as forced_bos_token_id); not printed, not counted as generated.
  std::vector<int> decoder_prefix_ids;
  int max_tokens = 64;
  sampling::SamplingParams sampling;  // validated by the engine against the vocabulary
  bool json = false;                  // one JSON object per token, then a summary
  unsigned threads = 0;
  int page_size = 16;
  std::string kv_cache_dtype = "auto";
  std::string device = "cpu";  // --device: cpu, auto, cuda, cuda:N
};

// Checks the request against `loaded` (ids inside the vocabulary, a tokenizer for --prompt),
// sizes the engine's KV pool for it, frees `loaded` (the engine loads the folder itself) and
// runs it, printing tokens as they come; returns the exit code (errors go to stderr, naming
// what was wrong).
int run_seq2seq_generate(LoadedModel loaded, const Seq2SeqGenerateOptions& o);

}  // namespace weft::cli
