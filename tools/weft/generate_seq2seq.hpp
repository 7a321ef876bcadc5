#pragma once
// `weft generate` on an encoder-decoder model folder (T5, M2M100/NLLB): the prompt is the
// encoder's input; the decoder starts from decoder_start_token_id and continues greedily or by
// sampling, on the CPU or one GPU (docs/seq2seq.md).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kernels/kv_dtype.hpp"
#include "loaders/model_loader.hpp"
#include "runtime/sampling/sampling_params.hpp"

namespace weft::cli {

struct Seq2SeqGenerateOptions {
  std::string model_dir;
  std::optional<std::string> prompt;  // encoded with the folder's tokenizer.json
  std::vector<int> prompt_ids;        // or given as ids
  // Forced decoder tokens after the start token (NLLB's target language code, which
  // transformers forces as forced_bos_token_id); not printed, not counted as generated.
  std::vector<int> decoder_prefix_ids;
  int max_tokens = 64;
  sampling::SamplingParams sampling;  // validated here against the vocabulary
  std::uint64_t seed = 0;
  bool json = false;  // one JSON object per token, then a summary
  bool ignore_eos = false;
  unsigned threads = 0;
  int page_size = 16;
  KvDtype kv_dtype = KvDtype::kF32;  // the CPU's pages
  // On a GPU (model::CudaSeq2Seq, bf16): threads, page_size and kv_dtype do not apply.
  bool cuda = false;
  int cuda_device = 0;
};

// Runs the request on `loaded.seq2seq`, printing tokens as they come; returns the exit code
// (errors are printed to stderr, naming what was wrong).
int run_seq2seq_generate(const LoadedModel& loaded, const Seq2SeqGenerateOptions& o);

}  // namespace weft::cli
