#include "tools/weft/generate_seq2seq.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <memory>
#include <span>

#include "loaders/tokenizer_json.hpp"
#include "runtime/model/seq2seq_runner.hpp"
#include "runtime/sampling/sequence_sampler.hpp"
#include "runtime/text/detokenizer.hpp"

#if WEFT_HAVE_CUDA
#include "runtime/model/cuda/cuda_seq2seq.hpp"
#endif

namespace weft::cli {

int run_seq2seq_generate(const LoadedModel& loaded, const Seq2SeqGenerateOptions& o) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft generate: " << message << '\n';
    return 1;
  };
  const auto& model = *loaded.seq2seq;
  const int vocab = model.spec().vocab_size;

  std::shared_ptr<const text::Tokenizer> tokenizer;
  const auto tokenizer_json = std::filesystem::path(o.model_dir) / "tokenizer.json";
  std::error_code ec;
  if (std::filesystem::exists(tokenizer_json, ec)) {
    auto t = loaders::load_tokenizer(tokenizer_json);
    if (!t) return fail(t.error().what());
    tokenizer = t->tokenizer;
  }
  std::vector<std::int32_t> source(o.prompt_ids.begin(), o.prompt_ids.end());
  if (o.prompt) {
    if (!tokenizer) return fail(o.model_dir + " has no tokenizer.json; use --prompt-ids");
    // The tokenizer's post-processor adds what the encoder expects (T5's </s>, NLLB's
    // language code and </s>).
    auto ids = tokenizer->encode(*o.prompt, /*add_special_tokens=*/true);
    if (!ids) return fail(ids.error().what());
    source.assign(ids->begin(), ids->end());
  }
  if (source.empty()) return fail("the prompt is empty; give --prompt or --prompt-ids");
  for (const auto id : source) {
    if (id < 0 || id >= vocab) {
      return fail("prompt token id " + std::to_string(id) +
                  " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  for (const int id : o.decoder_prefix_ids) {
    if (id < 0 || id >= vocab) {
      return fail("--decoder-prefix-ids: token id " + std::to_string(id) +
                  " is outside the model's vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  if (auto ok = sampling::validate(o.sampling, vocab); !ok) return fail(ok.error().what());

  // The decoder takes its start token and then each generated token but the last.
  const int max_tokens = std::max(o.max_tokens, 0);
  const int prefix = static_cast<int>(o.decoder_prefix_ids.size());
  const int decoder_positions = std::max(1, max_tokens) + prefix;
  std::unique_ptr<model::Seq2SeqRunner> session;
  if (o.cuda) {
#if WEFT_HAVE_CUDA
    model::CudaSeq2SeqOptions options;
    options.device = o.cuda_device;
    options.precision = cuda::Precision::kBF16;
    auto gpu = model::CudaSeq2Seq::create(model, options);
    if (!gpu) return fail(gpu.error().what());
    session = std::move(gpu.value());
#else
    return fail("device cuda:" + std::to_string(o.cuda_device) +
                ": this Weft was built without CUDA (configure with WEFT_CUDA=ON)");
#endif
  } else {
    const auto pages_for = [&](int tokens) { return (tokens + o.page_size - 1) / o.page_size; };
    const int pages = pages_for(static_cast<int>(source.size())) + pages_for(decoder_positions);
    model::KvLayout layout = model.kv_layout(o.page_size);
    layout.dtype = o.kv_dtype;
    if (static_cast<double>(pages) * static_cast<double>(layout.bytes_per_page()) >
        64.0 * (1ull << 30)) {
      return fail("--max-tokens " + std::to_string(o.max_tokens) +
                  " needs a KV cache over 64 GiB; at most 64 GiB is allowed");
    }
    try {
      session = std::make_unique<model::CpuSeq2SeqRunner>(model, o.page_size, pages, o.threads,
                                                          o.kv_dtype);
    } catch (const std::bad_alloc&) {
      return fail("not enough memory for the KV cache");
    }
  }
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  auto ids = session->start({source}, decoder_positions);
  if (!ids) return fail(ids.error().what());
  const double encode_s = std::chrono::duration<double>(clock::now() - start).count();
  const int id = ids->front();

  // The start token, then the forced prefix: all but the last are fed without sampling.
  std::vector<std::int32_t> decoder_prompt{model.decoder_start_token_id()};
  decoder_prompt.insert(decoder_prompt.end(), o.decoder_prefix_ids.begin(),
                        o.decoder_prefix_ids.end());
  std::vector<float> logits;
  for (std::size_t i = 0; i + 1 < decoder_prompt.size(); ++i) {
    if (auto ok = session->step({id}, {decoder_prompt[i]}, logits); !ok) {
      return fail(ok.error().what());
    }
  }
  std::int32_t next = decoder_prompt.back();
  sampling::SequenceSampler sampler(o.sampling, decoder_prompt, o.seed);
  std::optional<text::IncrementalDetokenizer> detokenizer;
  if (tokenizer) detokenizer.emplace(tokenizer, /*skip_special_tokens=*/true);
  const auto& eos = loaded.generation.eos_token_ids;
  std::string finish = "length";
  int generated = 0;
  double decode_s = 0;
  while (generated < max_tokens) {
    start = clock::now();
    if (auto ok = session->step({id}, {next}, logits); !ok) return fail(ok.error().what());
    decode_s += std::chrono::duration<double>(clock::now() - start).count();
    ++generated;
    auto sampled =
        sampler.try_sample(std::span<float>(logits.data(), static_cast<std::size_t>(vocab)));
    if (!sampled) return fail(sampled.error().what());
    const sampling::SampledToken& choice = sampled.value();
    const bool stop = !o.ignore_eos && std::find(eos.begin(), eos.end(), choice.id) != eos.end();
    const bool last = stop || generated == max_tokens;
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
    if (o.json) {
      boost::json::object event{{"id", choice.id}};
      if (detokenizer) event["text"] = piece;
      event["logprob"] = choice.logprob;
      if (o.sampling.logprobs > 0) {
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
    if (stop) {
      finish = "stop";
      break;
    }
    next = choice.id;
  }
  session->finish(id);
  if (o.json) {
    boost::json::object done{{"finish_reason", finish},
                             {"prompt_tokens", source.size()},
                             {"completion_tokens", generated},
                             {"encode_seconds", encode_s},
                             {"decode_seconds", decode_s}};
    std::cout << boost::json::serialize(done) << '\n';
  } else {
    std::cout << '\n';
  }
  return 0;
}

}  // namespace weft::cli
