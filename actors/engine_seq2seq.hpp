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

// The backend of an encoder-decoder model: on the CPU model::CpuSeq2SeqBackend (`num_pages`
// pages of `layout`, cpu_threads threads), on a GPU model::CudaSeq2SeqBackend (bf16 weights
// and KV pages; num_pages 0 sizes the pool from gpu_memory_fraction of the device; step
// buffers for max_tokens_per_step tokens). `layout` must be model.kv_layout's with the chosen
// dtype. Errors name the option: a GPU in a Weft built without CUDA, a kv_cache_dtype the GPU
// does not keep for these models (int8, fp8). `model` must outlive the backend.
Result<std::unique_ptr<model::ForwardBackend>> make_seq2seq_backend(
    const model::Seq2SeqModel& model, const DeviceChoice& device, const model::KvLayout& layout,
    int num_pages, unsigned cpu_threads, int max_tokens_per_step, double gpu_memory_fraction);

// The most positions a request may take on `device`, encoder tokens and decoder positions
// alike: on a GPU the CUDA attention's key limit (32768; a row's scores live in shared
// memory), on the CPU 0 (no limit but the pool).
int seq2seq_max_positions(const DeviceChoice& device);

// kInvalidArgument naming `prompt` or `max_tokens` when a request's source, or its decoder
// prompt plus max_tokens, would take more than `max_positions` positions (0: no limit).
Result<void> check_seq2seq_lengths(int max_positions, std::size_t source_tokens,
                                   std::size_t decoder_prompt_tokens, int max_tokens);

// The decoder's prompt: decoder_start_token_id, then `prefix` (decoder_prefix_ids), each
// checked against the vocabulary (kInvalidArgument naming the id).
Result<std::vector<std::int32_t>> seq2seq_decoder_prompt(const model::Seq2SeqModel& model,
                                                         const std::vector<std::int32_t>& prefix);

}  // namespace weft::actors
