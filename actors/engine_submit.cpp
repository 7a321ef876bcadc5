// Engine::submit: a request's checks (sampling, speculation, what encoder-decoder models
// refuse), its response format compiled off the actors' executor, then tokenized and handed to
// the sampler, detokenizer, constraint actor and scheduler (docs/engine.md).

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/post.hpp>

#include "actors/completion.hpp"
#include "actors/engine_impl.hpp"
#include "actors/engine_seq2seq.hpp"
#include "runtime/grammar/token_constraint.hpp"
#include "weft/engine.hpp"

namespace weft {

void Engine::submit_impl(GenerateRequest request,
                         asio::any_completion_handler<SubmitSignature> handler) {
  Impl& s = *impl_;
  auto fail = [&s](asio::any_completion_handler<SubmitSignature> h, Error error) {
    actors::complete(std::move(h), s.executor, std::make_exception_ptr(std::move(error)),
                     std::shared_ptr<RequestStream>());
  };
  if (s.stopping.load()) {
    return fail(std::move(handler), Error(ErrorCode::kShutdown, "the engine is shutting down"));
  }
  if (s.embedding) {
    return fail(std::move(handler),
                Error(ErrorCode::kUnsupported,
                      s.embedding->model().spec().architecture +
                          " is an encoder-only model: it embeds text (Engine::embed, POST "
                          "/v1/embeddings) and does not generate"));
  }
  if (auto ok = sampling::validate(request.sampling, s.vocab_size); !ok) {
    return fail(std::move(handler), ok.error());
  }
  if (const std::string& how = request.sampling.speculate;
      !how.empty() && how != "off" && how != s.config.speculate) {
    return fail(std::move(handler),
                Error(ErrorCode::kInvalidArgument,
                      "speculation.method: \"" + how + "\" needs an engine started with it (" +
                          (s.config.speculate.empty()
                               ? std::string("this one runs without a speculator; start it with "
                                             "--speculate ") +
                                     how
                               : "this one speculates with " + s.config.speculate) +
                          ")"));
  }
  if (request.sampling.beam_width > 1 && request.response_format.constrained()) {
    return fail(std::move(handler),
                Error(ErrorCode::kInvalidArgument,
                      "beam_width: cannot be combined with response_format (beams would each "
                      "need a grammar matcher of their own)"));
  }
  if (s.loaded.seq2seq) {
    const char* refused = request.response_format.constrained() ? "response_format"
                          : request.sampling.beam_width > 1     ? "beam_width > 1"
                                                                : nullptr;
    if (refused != nullptr) {
      return fail(std::move(handler),
                  Error(ErrorCode::kUnsupported,
                        std::string(refused) + ": not implemented for encoder-decoder models (" +
                            s.loaded.full_spec.architecture + ") yet"));
    }
  } else if (!request.decoder_prefix_ids.empty()) {
    return fail(std::move(handler), Error(ErrorCode::kInvalidArgument,
                                          "decoder_prefix_ids: for encoder-decoder models; " +
                                              s.loaded.full_spec.architecture +
                                              " is decoder-only (put the tokens in the prompt)"));
  }
  if (!request.response_format.constrained()) {
    return start(std::move(request), nullptr, std::move(handler));
  }
  // Compiled before anything else runs, so a bad format fails the submit.
  asio::post(s.compile_pool, [this, &s, fail, request = std::move(request),
                              handler = std::move(handler)]() mutable {
    auto compiled = s.constraint_compiler->compile(request.response_format);
    if (!compiled) {
      const Error& e = compiled.error();
      return fail(std::move(handler),
                  Error(e.code() == ErrorCode::kIo || e.code() == ErrorCode::kInternal
                            ? e.code()
                            : ErrorCode::kInvalidArgument,
                        // Tool call grammars name their tools[i] themselves.
                        (request.response_format.type == ResponseFormat::Type::kToolCalls
                             ? std::string()
                             : std::string("response_format: ")) +
                            std::string(e.what())));
    }
    if (s.stopping.load()) {
      return fail(std::move(handler), Error(ErrorCode::kShutdown, "the engine is shutting down"));
    }
    asio::post(s.warm_pool,
               [&s, grammar = compiled.value()] { grammar->precompute_all(&s.stopping); });
    // The output's first mask (a new schema's first-use masks can take milliseconds on a 128K
    // vocabulary) is computed here while the prompt is tokenized and prefilled, rather than on
    // the constraint actor's strand under the prefill step, where every row of the batch would
    // wait for it. It lands in the grammar's shared cache; the warm pool may still be busy
    // with earlier grammars.
    asio::post(s.compile_pool, [&s, grammar = compiled.value()] {
      if (s.stopping.load()) return;
      grammar::TokenConstraint first(grammar, s.vocab_size);
      (void)first.next_mask();
    });
    start(std::move(request), std::move(compiled.value()), std::move(handler));
  });
}

void Engine::start(GenerateRequest request, std::shared_ptr<const grammar::CompiledGrammar> grammar,
                   asio::any_completion_handler<SubmitSignature> handler) {
  Impl& s = *impl_;
  auto fail = [&s](asio::any_completion_handler<SubmitSignature> h, Error error) {
    actors::complete(std::move(h), s.executor, std::make_exception_ptr(std::move(error)),
                     std::shared_ptr<RequestStream>());
  };
  SamplingParams params = request.sampling;
  std::vector<std::int32_t> decoder_prefix = request.decoder_prefix_ids;
  // The reply runs on the tokenizer's strand, so requests reach the scheduler's queue in the
  // order they were submitted (an offline batch keeps its file's order, docs/engine.md): on the
  // worker pool, two replies could run at once and queue in either order.
  s.tokenizer->encode(
      std::move(request),
      asio::bind_executor(
          asio::any_io_executor(s.tokenizer->strand()),
          [&s, fail, params = std::move(params), grammar = std::move(grammar),
           decoder_prefix = std::move(decoder_prefix), handler = std::move(handler)](
              std::exception_ptr error, std::vector<std::int32_t> ids) mutable {
            if (error) {
              actors::complete(std::move(handler), s.executor, error,
                               std::shared_ptr<RequestStream>());
              return;
            }
            const auto n = static_cast<std::int64_t>(ids.size());
            if (n == 0) {
              return fail(std::move(handler),
                          Error(ErrorCode::kInvalidArgument, "prompt: empty after tokenization"));
            }
            if (s.context_length > 0 && n >= s.context_length) {
              return fail(
                  std::move(handler),
                  Error(ErrorCode::kInvalidArgument,
                        "prompt: " + std::to_string(n) + " tokens do not fit the context of " +
                            std::to_string(s.context_length) + " (and leave room for output)"));
            }
            if (s.context_length > 0 && n + params.max_tokens > s.context_length) {
              return fail(std::move(handler),
                          Error(ErrorCode::kInvalidArgument,
                                "max_tokens: " + std::to_string(params.max_tokens) + " after a " +
                                    std::to_string(n) + "-token prompt exceeds the context of " +
                                    std::to_string(s.context_length) + "; at most " +
                                    std::to_string(s.context_length - n)));
            }
            // An encoder-decoder model: `ids` are the encoder's input; the decoder starts from its
            // own prompt, which the sampler's penalties see as the prompt.
            std::vector<std::int32_t> decoder_prompt;
            if (s.loaded.seq2seq) {
              auto prompt = actors::seq2seq_decoder_prompt(*s.loaded.seq2seq, decoder_prefix);
              if (!prompt) return fail(std::move(handler), prompt.error());
              decoder_prompt = std::move(prompt.value());
              if (auto ok = actors::check_seq2seq_lengths(s.seq2seq_max_positions, ids.size(),
                                                          decoder_prompt.size(), params.max_tokens);
                  !ok) {
                return fail(std::move(handler), ok.error());
              }
            }
            const std::vector<std::int32_t>& sampler_prompt =
                s.loaded.seq2seq ? decoder_prompt : ids;
            // One sequence id per sample; the request (and its stream) takes the first.
            const int samples = std::max(1, params.n);
            const std::uint64_t id = s.next_id.fetch_add(static_cast<std::uint64_t>(samples));
            auto stream = std::make_shared<RequestStream>(id, samples);
            const std::uint64_t seed = params.seed ? *params.seed : s.draw_seed();
            for (int i = 0; i < samples; ++i) {
              s.sampler->add(id + static_cast<std::uint64_t>(i), params, sampler_prompt, seed, i);
              s.detokenizer->add(id + static_cast<std::uint64_t>(i), stream, params.stop, i);
              if (grammar) s.constraint->add(id + static_cast<std::uint64_t>(i), grammar);
            }
            const bool constrained = grammar != nullptr;
            auto added = [&s, id, samples, stream, constrained,
                          handler = std::move(handler)](std::exception_ptr e) mutable {
              if (e) {
                for (int i = 0; i < samples; ++i) {
                  s.sampler->remove(id + static_cast<std::uint64_t>(i));
                  s.detokenizer->remove(id + static_cast<std::uint64_t>(i));
                  if (constrained) s.constraint->remove(id + static_cast<std::uint64_t>(i));
                }
                stream.reset();
              }
              actors::complete(std::move(handler), s.executor, e, std::move(stream));
            };
            if (s.loaded.seq2seq) {
              s.scheduler->add_seq2seq(id, std::move(ids), std::move(decoder_prompt),
                                       std::move(params), stream, std::move(added));
            } else {
              s.scheduler->add(id, std::move(ids), std::move(params), stream, constrained,
                               std::move(added));
            }
          }));
}

}  // namespace weft
