#pragma once
// What the Engine does differently for an encoder-decoder model (T5, M2M100/NLLB;
// docs/seq2seq.md): the options it refuses, its forward backend, and each request's decoder
// prompt. Everything else (scheduler, sampler, detokenizer, streams) is the decoder-only path.

#include <cstdint>
#include <memory>
#include <vector>

#include "actors/device_backend.hpp"
#include "runtime/model/forward_backend.hpp"
#include "runtime/model/seq2seq_model.hpp"
#include "weft/engine.hpp"
#include "weft/error.hpp"

namespace weft::actors {

// kUnsupported, naming the option, for what encoder-decoder models do not run with yet
// (speculation, KV-Compress, quantization, tensor or pipeline parallelism, the GPU/CPU hybrid,
// a make_backend stand-in).
Result<void> check_seq2seq_config(const EngineConfig& config);

// The device an encoder-decoder model runs on: the CPU. "auto" falls back to it (logged); an
// explicit GPU is kUnsupported until a CUDA backend fills model::ForwardBackend for it.
Result<DeviceChoice> seq2seq_device(const EngineConfig& config, const DeviceChoice& parsed);

// The CPU backend (model::CpuSeq2SeqBackend): `num_pages` pages of `layout`, which must be
// model.kv_layout's with the chosen dtype. `model` must outlive it.
std::unique_ptr<model::ForwardBackend> make_seq2seq_backend(const model::Seq2SeqModel& model,
                                                            const model::KvLayout& layout,
                                                            int num_pages, unsigned cpu_threads);

// The decoder's prompt: decoder_start_token_id, then `prefix` (decoder_prefix_ids), each
// checked against the vocabulary (kInvalidArgument naming the id).
Result<std::vector<std::int32_t>> seq2seq_decoder_prompt(const model::Seq2SeqModel& model,
                                                         const std::vector<std::int32_t>& prefix);

}  // namespace weft::actors
