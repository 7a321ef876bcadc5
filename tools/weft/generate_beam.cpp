#include "tools/weft/generate_beam.hpp"

#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <cmath>
#include <iostream>
#include <optional>
#include <vector>

#include "weft/runtime.hpp"

namespace weft::cli {

namespace asio = boost::asio;

int run_generate_beam(EngineConfig config, GenerateRequest request, const std::string& format) {
  auto fail = [](const std::string& message) {
    std::cerr << "weft generate: " << message << '\n';
    return 1;
  };
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  std::optional<Engine> engine;
  try {
    engine.emplace(runtime.executor(), std::move(config));
  } catch (const Error& e) {
    return fail(e.what());
  }
  struct Beam {
    std::string text;
    std::vector<std::int32_t> ids;
    double sum = 0.0;
    FinishReason reason = FinishReason::kStop;
    std::string error;
  };
  const int n = std::max(1, request.sampling.n);
  const float length_penalty = request.sampling.length_penalty;
  std::vector<Beam> beams(static_cast<std::size_t>(n));
  int prompt_tokens = 0;
  try {
    auto stream = engine->submit(std::move(request), asio::use_future).get();
    for (int finals = 0; finals < n;) {
      Event e = stream->next(asio::use_future).get();
      Beam& b = beams.at(static_cast<std::size_t>(e.index));
      if (e.kind == Event::Kind::kFinal) {
        b.reason = e.finish_reason;
        b.error = e.error;
        prompt_tokens = e.usage.prompt_tokens;
        ++finals;
        continue;
      }
      b.text += e.text;
      b.ids.insert(b.ids.end(), e.token_ids.begin(), e.token_ids.end());
      for (const auto& t : e.logprobs)
        b.sum += t.logprob;
    }
  } catch (const std::exception& e) {
    engine->shutdown(asio::use_future).get();
    return fail(e.what());
  }
  engine->shutdown(asio::use_future).get();
  for (const Beam& b : beams) {
    if (b.reason == FinishReason::kError) return fail(b.error);
  }
  if (format == "json") {
    for (std::size_t i = 0; i < beams.size(); ++i) {
      const Beam& b = beams[i];
      const double length = static_cast<double>(std::max<std::size_t>(1, b.ids.size()));
      boost::json::array ids;
      for (auto id : b.ids)
        ids.push_back(id);
      boost::json::object out{{"index", i},
                              {"text", b.text},
                              {"token_ids", std::move(ids)},
                              {"logprob", b.sum},
                              {"score", b.sum / std::pow(length, length_penalty)},
                              {"finish_reason", std::string(to_string(b.reason))}};
      std::cout << boost::json::serialize(out) << '\n';
    }
    boost::json::object done{{"beams", beams.size()}, {"prompt_tokens", prompt_tokens}};
    std::cout << boost::json::serialize(done) << '\n';
    return 0;
  }
  for (std::size_t i = 0; i < beams.size(); ++i) {
    if (beams.size() > 1) std::cout << '[' << i << "] ";
    std::cout << beams[i].text << '\n';
  }
  return 0;
}

}  // namespace weft::cli
