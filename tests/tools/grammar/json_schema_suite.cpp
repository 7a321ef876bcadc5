// Checks the JSON Schema converter and the matcher against test cases and real-world schemas,
// through the matcher a request uses (a byte-level vocabulary: token i is byte i).
//
//   json_schema_suite suite --cases FILE --out FILE
//     FILE is a JSON array of groups {"file","description","schema","tests":[{"description",
//     "data","valid"}]} (suite_cases.js makes it from the JSON Schema Test Suite). Each schema
//     is compiled (or refused, with the error); each instance's compact JSON text is fed byte
//     by byte (one token each) and is accepted when every byte is allowed and the matcher can
//     end there. One JSON line per instance (and per refused group) goes to --out.
//
//   json_schema_suite sample --schemas DIR --out FILE [--samples N] [--seed S] [--max-bytes B]
//     For every *.json schema of DIR: compiles it (or records the refusal), then makes N
//     random walks through the matcher: each step draws uniformly among the allowed tokens,
//     and past B/2 bytes prefers ending the output (end of sequence, then a closing quote,
//     brace or bracket). One JSON line per schema to --out, with its outputs.

#include <boost/json.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "runtime/grammar/token_trie.hpp"

namespace {

namespace fs = std::filesystem;
namespace json = boost::json;
using namespace weft::grammar;

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error(p.string() + ": cannot be read");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

constexpr std::int32_t kEos = 256;

std::shared_ptr<const TokenTrie> byte_trie() {
  TokenizerVocab v;
  for (int b = 0; b < 256; ++b)
    v.tokens.push_back(std::string(1, static_cast<char>(b)));
  v.tokens.push_back("<eos>");
  v.special.assign(v.tokens.size(), false);
  v.special[kEos] = true;
  v.eos_ids = {kEos};
  auto t = TokenTrie::build(std::move(v));
  if (!t) throw std::runtime_error(t.error().what());
  return *t;
}

struct Compiled {
  std::shared_ptr<const CompiledGrammar> grammar;
  std::string error;  // set when refused
  std::vector<std::string> warnings;
};

Compiled compile(const std::string& schema, const std::shared_ptr<const TokenTrie>& trie) {
  Compiled out;
  JsonGrammarOptions options;
  options.warnings = &out.warnings;
  // The engine's path (ConstraintCompiler): the flat form the converter checked, compiled.
  auto g = json_schema_to_flat_grammar(schema, options);
  if (!g) {
    out.error = g.error().what();
    return out;
  }
  auto c = CompiledGrammar::compile(std::move(*g), trie);
  if (!c) {
    out.error = c.error().what();
    return out;
  }
  out.grammar = *c;
  return out;
}

bool accepts(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g, 1);
  for (unsigned char c : text)
    if (!m.accept_token(c)) return false;
  return m.can_terminate();
}

int run_suite(const fs::path& cases, const fs::path& out_path) {
  auto trie = byte_trie();
  json::value all = json::parse(read(cases));
  std::ofstream out(out_path);
  std::size_t groups = 0, refused = 0, unsound = 0, incomplete = 0, instances = 0;
  for (const auto& gv : all.as_array()) {
    const auto& group = gv.as_object();
    ++groups;
    const std::string schema = json::serialize(group.at("schema"));
    Compiled c = compile(schema, trie);
    json::object base{
        {"file", group.at("file")}, {"group", group.at("description")}, {"schema", schema}};
    if (!c.grammar) {
      ++refused;
      json::object line = base;
      line["refused"] = c.error;
      out << json::serialize(line) << "\n";
      continue;
    }
    for (const auto& tv : group.at("tests").as_array()) {
      const auto& test = tv.as_object();
      const std::string text = json::serialize(test.at("data"));
      const bool valid = test.at("valid").as_bool();
      const bool accepted = accepts(c.grammar, text);
      ++instances;
      if (accepted && !valid) ++unsound;
      if (!accepted && valid) ++incomplete;
      json::object line = base;
      line["test"] = test.at("description");
      line["data"] = text;
      line["valid"] = valid;
      line["accepted"] = accepted;
      out << json::serialize(line) << "\n";
    }
  }
  std::cout << "json_schema_suite: " << groups << " schemas, " << refused << " refused; "
            << instances << " instances: " << unsound << " invalid accepted (unsound), "
            << incomplete << " valid rejected\n";
  return 0;
}

std::string random_walk(const std::shared_ptr<const CompiledGrammar>& g, std::mt19937& rng,
                        std::size_t max_bytes, bool& finished) {
  GrammarMatcher m(g, 1);
  std::vector<std::uint32_t> words(m.bitmask_words());
  std::string text;
  finished = false;
  while (text.size() < max_bytes) {
    std::fill(words.begin(), words.end(), 0);
    m.fill_next_token_bitmask(words);
    std::vector<std::int32_t> allowed;
    for (std::int32_t t = 0; t <= kEos; ++t)
      if (words[t / 32] >> (t % 32) & 1) allowed.push_back(t);
    if (allowed.empty()) return text;
    std::int32_t pick = -1;
    if (text.size() > max_bytes / 2) {
      for (std::int32_t pref : {kEos, std::int32_t('"'), std::int32_t('}'), std::int32_t(']')})
        if (std::find(allowed.begin(), allowed.end(), pref) != allowed.end()) {
          pick = pref;
          break;
        }
    }
    if (pick < 0) {
      // Stop half the time where the output may end, so short outputs are common.
      const bool can_end = allowed.back() == kEos;
      if (can_end && (allowed.size() == 1 || rng() % 2 == 0)) {
        pick = kEos;
      } else {
        if (can_end) allowed.pop_back();
        pick = allowed[rng() % allowed.size()];
      }
    }
    if (!m.accept_token(pick)) throw std::runtime_error("the mask allowed a rejected token");
    if (pick == kEos) {
      finished = true;
      return text;
    }
    text += static_cast<char>(pick);
  }
  return text;
}

int run_sample(const fs::path& dir, const fs::path& out_path, int samples, unsigned seed,
               std::size_t max_bytes) {
  auto trie = byte_trie();
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  std::ofstream out(out_path);
  std::size_t compiled = 0, generated = 0;
  for (const auto& f : files) {
    Compiled c = compile(read(f), trie);
    json::object line{{"schema", fs::relative(f, dir).generic_string()}};
    json::array warnings;
    for (const auto& w : c.warnings)
      warnings.emplace_back(w);
    line["warnings"] = warnings;
    if (!c.grammar) {
      line["refused"] = c.error;
      out << json::serialize(line) << "\n";
      continue;
    }
    ++compiled;
    std::mt19937 rng(seed);
    json::array outputs;
    for (int i = 0; i < samples; ++i) {
      bool finished = false;
      std::string text = random_walk(c.grammar, rng, max_bytes, finished);
      if (finished) {
        outputs.emplace_back(text);
        ++generated;
      }
    }
    line["outputs"] = outputs;
    out << json::serialize(line) << "\n";
  }
  std::cout << "json_schema_suite: " << files.size() << " schemas, " << compiled << " compiled, "
            << generated << " outputs\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    auto opt = [&](const std::string& name, const std::string& fallback) {
      for (std::size_t i = 0; i + 1 < args.size(); ++i)
        if (args[i] == name) return args[i + 1];
      if (fallback.empty()) throw std::runtime_error("missing " + name);
      return fallback;
    };
    if (!args.empty() && args[0] == "suite") return run_suite(opt("--cases", ""), opt("--out", ""));
    if (!args.empty() && args[0] == "sample")
      return run_sample(opt("--schemas", ""), opt("--out", ""), std::stoi(opt("--samples", "4")),
                        static_cast<unsigned>(std::stoul(opt("--seed", "1"))),
                        std::stoul(opt("--max-bytes", "2000")));
    std::cerr << "usage: json_schema_suite suite --cases FILE --out FILE\n"
                 "       json_schema_suite sample --schemas DIR --out FILE [--samples N] "
                 "[--seed S] [--max-bytes B]\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "json_schema_suite: " << e.what() << "\n";
    return 1;
  }
}
