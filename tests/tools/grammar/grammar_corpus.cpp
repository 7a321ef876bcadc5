// Generates from every JSON Schema of a corpus folder through the Engine (the constraint
// actor, the sampler's masks, the step loop) at temperature 1.0 over many seeds, and writes
// one JSON line per sample for validate.js to check with ajv. Also checks that each schema of
// an `unsupported` folder is refused at submit, before generation, with an error naming what
// its "$comment" says.
//
// Usage: grammar_corpus --model DIR --schemas DIR --out FILE [--unsupported DIR]
//          [--samples N] [--max-tokens N] [--byte-tokenizer WORKDIR]
// --byte-tokenizer: the model has no tokenizer.json (the random-weight fixtures of
// tests/fixtures/models, 256 ids): WORKDIR gets the model's files (linked) and a byte-level
// tokenizer.json whose token i is byte i, except the eos ids of generation_config.json,
// which become special tokens.

#include <boost/asio/use_future.hpp>
#include <boost/json.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "weft/engine.hpp"
#include "weft/runtime.hpp"

namespace {

namespace asio = boost::asio;
namespace fs = std::filesystem;
namespace json = boost::json;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// GPT-2's bytes_to_unicode(): the text of byte b in a byte-level BPE vocabulary.
std::string byte_token_text(int b) {
  static std::vector<std::string> table = [] {
    std::vector<std::string> t(256);
    int next = 0;
    for (int x = 0; x < 256; ++x) {
      const bool printable =
          (x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF);
      const unsigned cp = printable ? static_cast<unsigned>(x) : 256u + next++;
      std::string s;
      if (cp < 0x80) {
        s += static_cast<char>(cp);
      } else {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
      }
      t[static_cast<std::size_t>(x)] = s;
    }
    return t;
  }();
  return table[static_cast<std::size_t>(b)];
}

fs::path with_byte_tokenizer(const fs::path& model, const fs::path& workdir) {
  const fs::path dir = workdir / model.filename();
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(model)) {
    const fs::path link = dir / e.path().filename();
    if (!fs::exists(fs::symlink_status(link))) fs::create_symlink(fs::absolute(e.path()), link);
  }
  const json::value gen = json::parse(read(model / "generation_config.json"));
  std::vector<std::int64_t> eos;
  if (const auto* e = gen.as_object().if_contains("eos_token_id")) {
    if (e->is_array()) {
      for (const auto& x : e->as_array())
        eos.push_back(x.to_number<std::int64_t>());
    } else {
      eos.push_back(e->to_number<std::int64_t>());
    }
  }
  json::object vocab;
  json::array added;
  for (int b = 0; b < 256; ++b) {
    if (std::find(eos.begin(), eos.end(), b) != eos.end()) {
      added.push_back({{"id", b},
                       {"content", "<eos" + std::to_string(b) + ">"},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    } else {
      vocab[byte_token_text(b)] = b;
    }
  }
  json::object byte_level{{"type", "ByteLevel"},
                          {"add_prefix_space", false},
                          {"trim_offsets", true},
                          {"use_regex", false}};
  json::object tok{{"version", "1.0"},
                   {"added_tokens", added},
                   {"normalizer", nullptr},
                   {"pre_tokenizer", byte_level},
                   {"post_processor", nullptr},
                   {"decoder", byte_level},
                   {"model",
                    {{"type", "BPE"},
                     {"dropout", nullptr},
                     {"unk_token", nullptr},
                     {"byte_fallback", false},
                     {"vocab", vocab},
                     {"merges", json::array()}}}};
  std::ofstream(dir / "tokenizer.json") << json::serialize(tok);
  return dir;
}

struct Options {
  std::string model, schemas, out, unsupported, byte_tokenizer;
  int samples = 8;
  int max_tokens = 160;
};

std::string arg_value(int& i, int argc, char** argv) {
  if (i + 1 >= argc) throw std::runtime_error(std::string(argv[i]) + " needs a value");
  return argv[++i];
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--model")
      o.model = arg_value(i, argc, argv);
    else if (a == "--schemas")
      o.schemas = arg_value(i, argc, argv);
    else if (a == "--out")
      o.out = arg_value(i, argc, argv);
    else if (a == "--unsupported")
      o.unsupported = arg_value(i, argc, argv);
    else if (a == "--byte-tokenizer")
      o.byte_tokenizer = arg_value(i, argc, argv);
    else if (a == "--samples")
      o.samples = std::stoi(arg_value(i, argc, argv));
    else if (a == "--max-tokens")
      o.max_tokens = std::stoi(arg_value(i, argc, argv));
    else
      throw std::runtime_error("unknown option " + a);
  }
  if (o.model.empty() || o.schemas.empty() || o.out.empty()) {
    throw std::runtime_error("usage: grammar_corpus --model DIR --schemas DIR --out FILE ...");
  }
  fs::path model = o.model;
  if (!o.byte_tokenizer.empty()) model = with_byte_tokenizer(model, o.byte_tokenizer);

  weft::Runtime runtime(weft::RuntimeOptions{.worker_threads = 1});
  weft::EngineConfig config;
  config.model_dir = model.string();
  config.kv_budget_bytes = 128ll << 20;
  config.cpu_threads = 2;
  config.max_running = 256;
  weft::Engine engine(runtime.executor(), config);
  int failures = 0;

  // Unsupported or invalid schemas: refused at submit with the error their $comment names.
  if (!o.unsupported.empty()) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(o.unsupported))
      if (e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      const std::string text = read(f);
      const json::value v = json::parse(text);
      const std::string expected(v.as_object().at("$comment").as_string());
      weft::GenerateRequest r;
      r.prompt_ids = {1, 2};
      r.sampling.max_tokens = 4;
      r.response_format.type = weft::ResponseFormat::Type::kJsonSchema;
      r.response_format.source = text;
      std::string error;
      try {
        engine.submit(std::move(r), asio::use_future).get();
        error = "(accepted)";
      } catch (const weft::Error& e) {
        error = e.what();
      }
      if (error.find("response_format: ") != 0 || error.find(expected) == std::string::npos) {
        std::cout << "FAIL " << f.filename().string() << ": expected an error with '" << expected
                  << "', got '" << error << "'\n";
        ++failures;
      } else {
        std::cout << "refused " << f.filename().string() << ": " << error << '\n';
      }
    }
  }

  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(o.schemas))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  const auto start = std::chrono::steady_clock::now();
  struct Live {
    std::string name;
    std::shared_ptr<weft::RequestStream> stream;
  };
  std::vector<Live> live;
  for (std::size_t k = 0; k < files.size(); ++k) {
    weft::GenerateRequest r;
    // A few bytes of prompt; each schema has its own seed, and its samples differ.
    r.prompt_ids = {static_cast<std::int32_t>(5 + k % 7), 17, static_cast<std::int32_t>(40 + k)};
    r.sampling.temperature = 1.0f;
    r.sampling.n = o.samples;
    r.sampling.seed = 1000 + k;
    r.sampling.max_tokens = o.max_tokens;
    r.response_format.type = weft::ResponseFormat::Type::kJsonSchema;
    r.response_format.source = read(files[k]);
    // Every third schema allows whitespace between tokens.
    r.response_format.flexible_whitespace = k % 3 == 2;
    try {
      live.push_back({files[k].filename().string(), engine.submit(r, asio::use_future).get()});
    } catch (const weft::Error& e) {
      std::cout << "FAIL " << files[k].filename().string() << ": refused: " << e.what() << '\n';
      ++failures;
    }
  }
  std::ofstream out(o.out);
  std::map<std::string, int> reasons;
  for (auto& l : live) {
    std::vector<std::string> text(static_cast<std::size_t>(o.samples));
    for (int finals = 0; finals < o.samples;) {
      weft::Event e = l.stream->next(asio::use_future).get();
      if (e.kind == weft::Event::Kind::kDelta) {
        text[static_cast<std::size_t>(e.index)] += e.text;
        continue;
      }
      ++finals;
      const std::string reason(weft::to_string(e.finish_reason));
      ++reasons[reason];
      json::object line{{"schema", l.name},
                        {"sample", e.index},
                        {"finish", reason},
                        {"text", text[static_cast<std::size_t>(e.index)]}};
      if (!e.error.empty()) line["error"] = e.error;
      out << json::serialize(line) << '\n';
    }
  }
  out.close();
  const weft::EngineMetrics m = engine.metrics(asio::use_future).get();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "schemas " << files.size() << ", samples " << files.size() * o.samples << ", "
            << seconds << " s:";
  for (const auto& [r, n] : reasons)
    std::cout << ' ' << r << '=' << n;
  std::cout << "\nsteps " << m.steps << " (constrained " << m.constrained_steps << "), tokens "
            << m.generated_tokens << ", forward " << m.forward_us / 1000 << " ms, masks "
            << m.masks_computed << " computed in " << m.mask_compute_us / 1000
            << " ms under the forward pass, waited " << m.mask_wait_us / 1000
            << " ms after it, accept " << m.constraint_accept_us / 1000 << " ms\n";
  if (reasons.count("error")) ++failures;
  std::cout << failures << " failure(s)\n";
  return failures == 0 ? 0 : 1;
} catch (const std::exception& e) {
  std::cerr << "grammar_corpus: " << e.what() << '\n';
  return 1;
}
