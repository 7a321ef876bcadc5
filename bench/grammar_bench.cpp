// Constraint engine speed: next-token bitmask time per token (p50/p99) for the Llama-3
// vocabulary on one core, driving the matcher through a valid JSON document token by token
// (tokenized with Weft's own Llama-3 tokenizer), and compile time per schema.
// Masks are computed on a position's first use (CompiledGrammar), so the first pass over a
// document (cold: compile_ms, then first_ms for all its masks and cold_max_us for the slowest)
// is reported apart from the later passes (warm p50/p99/max), and all_ms is what computing
// every mask of the grammar up front takes.
// Usage: grammar_bench [TOKENIZER_JSON] [REPEATS] [--corpus DIR]...
//   default TOKENIZER_JSON: BUILD_DIR/test-data/tokenizers/llama3/tokenizer.json
//   (scripts/fetch-test-data BUILD_DIR puts it there)
//   --corpus DIR: also compile every *.json schema under DIR (e.g.
//   tests/fixtures/schemas/real-world) and report schema-to-grammar and compile time
//   percentiles, and the first mask's time; then, per schema, a fresh grammar driven through
//   a random walk of up to 64 tokens (seeded; each token drawn uniformly among the allowed
//   ones, jump-forward text accepted after each): what a new schema's first tokens cost on the
//   TTFT path (every mask on it is a position's first use), as percentiles over the schemas of
//   the walk's total mask time and of its slowest mask. --corpus may be given more than once.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loaders/tokenizer_json.hpp"
#include "runtime/grammar/grammar_matcher.hpp"
#include "runtime/grammar/json_schema_to_grammar.hpp"
#include "runtime/grammar/tokenizer_vocab.hpp"

using namespace weft;
using Clock = std::chrono::steady_clock;

namespace {

struct Case {
  const char* name;
  const char* schema;
  const char* document;
};

const Case kCases[] =
    {
        {"flat object",
         R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer","minimum":0,"maximum":150},"email":{"type":"string","format":"email"},"active":{"type":"boolean"},"score":{"type":"number"},"nickname":{"type":"string"}},"required":["name","age","active"]})",
         R"({"name":"Ada Lovelace","age":36,"email":"ada@analytical-engine.org","active":true,"score":98.25,"nickname":"The Enchantress of Numbers"})"},
        {"nested object with arrays",
         R"({"type":"object","properties":{"order_id":{"type":"integer"},"customer":{"type":"object","properties":{"id":{"type":"integer"},"name":{"type":"string"},"tags":{"type":"array","items":{"type":"string"}}},"required":["id","name"]},"items":{"type":"array","items":{"type":"object","properties":{"sku":{"type":"string"},"qty":{"type":"integer","minimum":1},"price":{"type":"number","minimum":0}},"required":["sku","qty","price"]},"minItems":1}},"required":["order_id","customer","items"]})",
         R"({"order_id":90210,"customer":{"id":42,"name":"Grace Hopper","tags":["vip","navy","compilers"]},"items":[{"sku":"A-100","qty":2,"price":19.99},{"sku":"B-205","qty":1,"price":5},{"sku":"C-999","qty":12,"price":0.5}]})"},
        {"enum-heavy",
         R"({"type":"object","properties":{"country":{"enum":["Argentina","Australia","Austria","Belgium","Brazil","Canada","Chile","China","Colombia","Denmark","Egypt","Finland","France","Germany","Greece","India","Indonesia","Ireland","Israel","Italy","Japan","Kenya","Mexico","Netherlands","New Zealand","Nigeria","Norway","Peru","Poland","Portugal","Spain","Sweden","Switzerland","Thailand","Turkey","Ukraine","United Kingdom","United States","Vietnam"]},"status":{"enum":["pending","active","suspended","closed"]},"color":{"enum":["red","green","blue","cyan","magenta","yellow","black","white"]},"priority":{"enum":[1,2,3,4,5]},"plan":{"enum":["free","pro","enterprise",null]}},"required":["country","status","color","priority","plan"]})",
         R"({"country":"United Kingdom","status":"active","color":"magenta","priority":3,"plan":"enterprise"})"},
        {"string patterns and formats", R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},"created":{"type":"string","format":"date-time"},"birthday":{"type":"string","format":"date"},"ip":{"type":"string","format":"ipv4"},"code":{"type":"string","pattern":"^[A-Z]{3}-\\d{4}$"},"site":{"type":"string","format":"uri"},"title":{"type":"string","maxLength":40}},"required":["id","created","birthday","ip","code","site","title"]})", R"({"id":"123e4567-e89b-12d3-a456-426614174000","created":"2024-05-17T09:30:00Z","birthday":"1990-02-28","ip":"192.168.10.254","code":"ABC-1234","site":"https://example.com/docs?page=2","title":"Constrained decoding notes"})"},
        {"recursive",
         R"({"$defs":{"node":{"type":"object","properties":{"name":{"type":"string"},"value":{"type":"integer"},"children":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["name"]}},"$ref":"#/$defs/node"})",
         R"({"name":"root","value":1,"children":[{"name":"left","value":2,"children":[{"name":"leaf","value":4}]},{"name":"right","children":[{"name":"a","value":5},{"name":"b","value":6,"children":[]}]}]})"},
};

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * (v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  std::string path =
      argc > 1 ? argv[1]
               : std::string(WEFT_BINARY_DIR) + "/test-data/tokenizers/llama3/tokenizer.json";
  int repeats = argc > 2 ? std::max(2, std::atoi(argv[2])) : 20;
  std::vector<std::string> corpora;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--corpus") corpora.push_back(argv[i + 1]);
  if (argc > 1 && std::string(argv[1]) == "--corpus")
    path = std::string(WEFT_BINARY_DIR) + "/test-data/tokenizers/llama3/tokenizer.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "grammar_bench: %s is missing: run scripts/fetch-test-data %s\n",
                 path.c_str(), WEFT_BINARY_DIR);
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  auto vocab = grammar::vocab_from_tokenizer_json(ss.str());
  auto tok = loaders::load_tokenizer(path);
  if (!vocab || !tok) {
    std::fprintf(stderr, "grammar_bench: %s\n", !vocab ? vocab.error().what() : tok.error().what());
    return 1;
  }
  for (std::size_t i = 0; i < vocab->tokens.size(); ++i)
    if (vocab->tokens[i] == "<|end_of_text|>" || vocab->tokens[i] == "<|eot_id|>")
      vocab->eos_ids.push_back(static_cast<std::int32_t>(i));
  auto t0 = Clock::now();
  auto trie = grammar::TokenTrie::build(*vocab);
  double trie_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!trie) {
    std::fprintf(stderr, "grammar_bench: %s\n", trie.error().what());
    return 1;
  }
  std::printf("vocabulary: %zu tokens, trie %zu nodes built in %.1f ms; %d passes per document\n",
              vocab->tokens.size(), (*trie)->node_count(), trie_ms, repeats);
  std::printf("%-28s %10s %8s %8s %11s %9s %9s %9s %8s %9s\n", "schema", "compile_ms", "first_ms",
              "tokens", "cold_max_us", "p50_us", "p99_us", "max_us", "all_ms", "positions");
  for (const auto& c : kCases) {
    auto g = grammar::json_schema_to_grammar(c.schema);
    if (!g) {
      std::fprintf(stderr, "%s: %s\n", c.name, g.error().what());
      return 1;
    }
    auto c0 = Clock::now();
    auto cg = grammar::CompiledGrammar::compile(*g, *trie);
    double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - c0).count();
    if (!cg) {
      std::fprintf(stderr, "%s: %s\n", c.name, cg.error().what());
      return 1;
    }
    auto ids = tok->tokenizer->encode(c.document, false);
    if (!ids) {
      std::fprintf(stderr, "%s: %s\n", c.name, ids.error().what());
      return 1;
    }
    std::vector<double> times, cold;
    std::vector<std::uint32_t> mask;
    for (int r = 0; r < repeats; ++r) {
      if (r == 1) {
        cold = std::move(times);
        times.clear();
      }
      grammar::GrammarMatcher m(*cg);
      mask.assign(m.bitmask_words(), 0);
      for (std::size_t i = 0; i <= ids->size(); ++i) {
        auto s = Clock::now();
        m.fill_next_token_bitmask(mask);
        times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
        std::int32_t next =
            i < ids->size() ? static_cast<std::int32_t>((*ids)[i]) : vocab->eos_ids[0];
        if (!(mask[next / 32] >> (next % 32) & 1) || !m.accept_token(next)) {
          std::fprintf(stderr, "%s: token %zu (%d) of the document was not allowed\n", c.name, i,
                       next);
          return 1;
        }
      }
    }
    double first = 0;
    for (double t : cold)
      first += t;
    auto eager = grammar::CompiledGrammar::compile(*g, *trie);
    auto e0 = Clock::now();
    (*eager)->precompute_all();
    double all_ms = std::chrono::duration<double, std::milli>(Clock::now() - e0).count();
    std::printf("%-28s %10.2f %8.1f %8zu %11.1f %9.1f %9.1f %9.1f %8.1f %9zu\n", c.name, compile_ms,
                first / 1000, ids->size() + 1, percentile(cold, 1.0), percentile(times, 0.5),
                percentile(times, 0.99), percentile(times, 1.0), all_ms, (*cg)->position_count());
    auto [where, most] = (*cg)->largest_uncertain();
    std::printf("    stack-dependent tokens: %zu over all positions, at most %zu (%s)\n",
                (*cg)->uncertain_count(), most, where.c_str());
  }
  for (const auto& corpus : corpora) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(corpus))
      if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<double> convert, compile, first_mask, walk_total, walk_max, walk_jf;
    std::vector<std::pair<double, std::string>> slowest;
    std::size_t refused = 0;
    std::vector<std::uint32_t> mask;
    for (const auto& f : files) {
      std::ifstream fin(f, std::ios::binary);
      std::stringstream text;
      text << fin.rdbuf();
      auto s0 = Clock::now();
      auto g = grammar::json_schema_to_grammar(text.str());
      auto s1 = Clock::now();
      if (!g) {
        ++refused;
        continue;
      }
      auto cg = grammar::CompiledGrammar::compile(*g, *trie);
      auto s2 = Clock::now();
      if (!cg) {
        ++refused;
        continue;
      }
      grammar::GrammarMatcher m(*cg);
      mask.assign(m.bitmask_words(), 0);
      m.fill_next_token_bitmask(mask);
      auto s3 = Clock::now();
      convert.push_back(std::chrono::duration<double, std::milli>(s1 - s0).count());
      compile.push_back(std::chrono::duration<double, std::milli>(s2 - s1).count());
      first_mask.push_back(std::chrono::duration<double, std::milli>(s3 - s2).count());
      // The first tokens of a new schema: a fresh grammar, so every position is a first use.
      auto fresh = grammar::CompiledGrammar::compile(*g, *trie);
      grammar::GrammarMatcher w(*fresh);
      std::mt19937 rng(static_cast<unsigned>(std::hash<std::string>{}(f.filename().string())));
      double total = 0, most = 0, jf = 0;
      std::vector<std::int32_t> allowed;
      for (int step = 0; step < 64 && !w.is_terminated(); ++step) {
        auto m0 = Clock::now();
        w.fill_next_token_bitmask(mask);
        double ms = std::chrono::duration<double, std::milli>(Clock::now() - m0).count();
        total += ms;
        most = std::max(most, ms);
        allowed.clear();
        for (std::size_t t = 0; t < vocab->tokens.size(); ++t)
          if (mask[t / 32] >> (t % 32) & 1) allowed.push_back(static_cast<std::int32_t>(t));
        if (allowed.empty()) break;
        auto next = allowed[std::uniform_int_distribution<std::size_t>(0, allowed.size() - 1)(rng)];
        if (!w.accept_token(next)) {
          std::fprintf(stderr, "%s: the walk's token %d was allowed but not accepted\n",
                       f.string().c_str(), next);
          return 1;
        }
        auto j0 = Clock::now();
        auto forced = w.find_jump_forward_string();
        if (!forced.empty()) w.accept_bytes(forced);
        jf += std::chrono::duration<double, std::milli>(Clock::now() - j0).count();
      }
      walk_total.push_back(total);
      walk_max.push_back(most);
      walk_jf.push_back(jf);
      slowest.emplace_back(total, f.filename().string());
    }
    if (compile.empty()) {
      std::fprintf(stderr, "grammar_bench: no schema under %s compiled\n", corpus.c_str());
      return 1;
    }
    std::printf("corpus %s: %zu schemas compiled, %zu refused\n", corpus.c_str(), compile.size(),
                refused);
    std::printf("%-22s %9s %9s %9s\n", "ms", "p50", "p99", "max");
    auto row = [](const char* name, const std::vector<double>& v) {
      std::printf("%-22s %9.2f %9.2f %9.2f\n", name, percentile(v, 0.5), percentile(v, 0.99),
                  percentile(v, 1.0));
    };
    row("schema to grammar", convert);
    row("compile", compile);
    row("first mask", first_mask);
    row("walk masks (64 tokens)", walk_total);
    row("walk slowest mask", walk_max);
    row("walk jump-forward", walk_jf);
    std::sort(slowest.rbegin(), slowest.rend());
    std::printf("slowest walks (ms):");
    for (std::size_t i = 0; i < std::min<std::size_t>(5, slowest.size()); ++i)
      std::printf(" %s %.1f", slowest[i].second.c_str(), slowest[i].first);
    std::printf("\n");
  }
  return 0;
}
