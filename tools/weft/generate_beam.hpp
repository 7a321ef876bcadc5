#pragma once
// `weft generate --beam-width W`: beam search needs several sequences sharing the prompt's KV
// pages, so it runs through the Engine (docs/sampling.md#beam-search) instead of generate's
// single-sequence loop.

#include <string>

#include "weft/engine.hpp"

namespace weft::cli {

// Runs `request` (request.sampling.beam_width > 1) on an engine made from `config`, then prints
// each returned beam, best first: in `format` "text", its text (with "[i] " before each when
// more than one); in "json", one object per beam (index, text, token_ids, logprob: the sum,
// score: the sum / length^length_penalty, finish_reason), then a summary. Returns the exit
// code; errors go to stderr as "weft generate: ...".
int run_generate_beam(EngineConfig config, GenerateRequest request, const std::string& format);

}  // namespace weft::cli
