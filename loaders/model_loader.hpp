#pragma once
// Loads a Hugging Face model folder: picks the spec from config.json's "architectures" (or
// takes one given explicitly), maps the safetensors weights and binds them into a Model. A
// GGUF file given instead of a folder loads through loaders/gguf_model.hpp.

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>

#include "loaders/safetensors.hpp"
#include "runtime/model/encoder_model.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/seq2seq_model.hpp"
#include "weft/error.hpp"

namespace weft {

struct LoadOptions {
  std::filesystem::path spec_file;  // empty: choose from spec_dir by architecture
  std::filesystem::path spec_dir;   // empty: default_spec_dir()
  // Load only this rank's shard of a tensor-parallel group (docs/parallel.md): the model's
  // spec then holds the rank's heads and MLP slice, and its forward needs the group's
  // communicator. Shapes the group size does not divide are refused.
  int tensor_parallel_size = 1;
  int tensor_parallel_rank = 0;
  // Load only one pipeline stage's layers (docs/parallel.md): stage s of pipeline_parallel_size
  // holds the planner's layer range (its KV layout then holds only those layers); with
  // tensor_parallel_size > 1 too, the rank's shard of that stage (tensor_parallel_rank is then
  // the rank within the stage's group).
  int pipeline_parallel_size = 1;
  int pipeline_stage = 0;
  // Encoder-only models (BERT family) load into LoadedModel::encoder only when the caller
  // can run them (the Engine's embeddings); otherwise they are refused with a message
  // pointing at `weft embed`.
  bool allow_encoder = false;
  // Encoder-decoder models (T5, M2M100/NLLB) load into LoadedModel::seq2seq only when the
  // caller can run them (the Engine, `weft generate`); otherwise they are refused with a message
  // saying what runs them.
  bool allow_seq2seq = false;
  // Quantize the weight matrices to this format as they load (docs/quantization.md); kNone
  // keeps the checkpoint's dtype. A folder already quantized (config.json's "quantization")
  // loads in its own format whatever this says, except that asking for another is an error.
  quant::QuantType quantize = quant::QuantType::kNone;
  unsigned quantize_threads = 0;  // 0: one per core
  std::function<void(std::size_t done, std::size_t total)> on_quantize_progress;
};

struct LoadedModel {
  std::filesystem::path spec_file;
  model::GenerationDefaults generation;
  std::shared_ptr<const WeightFiles> weights;  // the mapped files the model's views point into
  model::Model model;                          // decoder-only networks
  // Encoder-only networks (BERT family): `model` is then empty. Its spec's pooling and
  // normalize come from the spec file, overridden by a sentence-transformers folder's
  // 1_Pooling/config.json and modules.json.
  std::optional<model::EncoderModel> encoder;
  // Encoder-decoder networks (T5, M2M100): `model` is then empty.
  std::optional<model::Seq2SeqModel> seq2seq;
  model::ModelSpec full_spec;  // the whole model's spec (model.spec() is the rank's shard)
};

// Where spec files are looked for: $WEFT_SPEC_DIR if set, else config/models of the source
// tree this library was built from, or of the tree above the executable (bundled_path).
std::filesystem::path default_spec_dir();

Result<LoadedModel> load_model(const std::filesystem::path& dir, const LoadOptions& options = {});

}  // namespace weft
