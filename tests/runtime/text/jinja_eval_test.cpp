// The Jinja subset, feature by feature: each snippet of
// tests/fixtures/chat_templates/jinja_snippets.json rendered by transformers (expected.json,
// "snippets") must render the same here; plus the errors, with their line and column.

#include "runtime/text/jinja_eval.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <iterator>
#include <random>

#include "loaders/chat_template_file.hpp"
#include "runtime/text/chat_template.hpp"

namespace weft::jinja {
namespace {

namespace fs = std::filesystem;

const fs::path kFixtures = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/chat_templates";
// The npm packages' tokenizer_config.json, fetched into the build folder by
// scripts/fetch-test-data (not committed); llama2_chat_format is ours, in kFixtures.
fs::path family_dir(const std::string& family) {
  if (family == "llama2_chat_format") return kFixtures / family;
  return fs::path(WEFT_BINARY_DIR) / "test-data/tokenizers" / family;
}

const Value& field(const Value& dict, std::string_view key) {
  static const Value kMissing;
  const Value* v = dict.is_dict() ? dict.as_dict().find(key) : nullptr;
  return v ? *v : kMissing;
}

TEST(JinjaSnippetTest, MatchesTransformers) {
  auto snippets = read_json_value_file(kFixtures / "jinja_snippets.json");
  auto expected = read_json_value_file(kFixtures / "expected.json");
  ASSERT_TRUE(snippets.ok()) << snippets.error().what();
  ASSERT_TRUE(expected.ok()) << expected.error().what();
  // transformers renders the snippets with the Llama-3 tokenizer's special tokens.
  auto llama3 = read_chat_template_file(family_dir("llama3"));
  ASSERT_TRUE(llama3.ok()) << llama3.error().what() << " (run scripts/fetch-test-data "
                           << WEFT_BINARY_DIR << ")";

  int compared = 0, matched = 0;
  for (const Value& s : snippets->as_list()) {
    const std::string name = field(s, "name").as_string();
    SCOPED_TRACE(name);
    const Value& want = field(field(*expected, "snippets"), name);
    ASSERT_FALSE(want.is_undefined()) << "expected.json lacks snippet " << name;
    ++compared;
    ChatTemplateOptions options;
    Value messages = Value(List{Value(Dict{{{"role", Value("user")}, {"content", Value("hi")}}})});
    for (const auto& [k, v] : field(s, "vars").as_dict().items) {
      if (k == "messages") {
        messages = v;
      } else if (k == "tools") {
        options.tools = v;
      } else {
        options.extra.set(k, v);
      }
    }
    auto t = ChatTemplate::parse(field(s, "template").as_string(), "snippet " + name,
                                 llama3->special_tokens);
    Result<std::string> got = t ? t->render(messages, options) : Result<std::string>(t.error());
    if (!field(want, "error").is_undefined()) {
      EXPECT_FALSE(got.ok()) << "transformers raised " << field(want, "error").as_string()
                             << " but Weft rendered: " << (got.ok() ? got.value() : "");
      if (!got.ok()) ++matched;
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.error().what();
    EXPECT_EQ(got.value(), field(want, "text").as_string());
    if (got.value() == field(want, "text").as_string()) ++matched;
  }
  std::cout << "jinja snippets: " << matched << "/" << compared << " match transformers\n";
}

std::string render(std::string_view source, const Dict& vars = {}) {
  auto t = Template::parse(source, "t.jinja");
  if (!t) return "PARSE ERROR: " + std::string(t.error().what());
  auto r = t->render(vars);
  if (!r) return "RENDER ERROR: " + std::string(r.error().what());
  return r.value();
}

TEST(JinjaEvalTest, ErrorsNameLineAndColumn) {
  EXPECT_EQ(render("ab\n  {{ x.y.z }}"),
            "RENDER ERROR: t.jinja:2:7: 'x' is undefined (while reading attribute 'y')");
  EXPECT_EQ(render("{% if true %}\n{{ raise_exception('bad input') }}{% endif %}"),
            "RENDER ERROR: t.jinja:2:4: raise_exception: bad input");
  EXPECT_EQ(render("{{ 1 + 'a' }}"),
            "RENDER ERROR: t.jinja:1:6: unsupported operand type(s) for +: 'int' and 'str'");
  EXPECT_EQ(render("{{ x | nosuchfilter }}"),
            "PARSE ERROR: t.jinja:1:8: no filter named 'nosuchfilter'");
  EXPECT_EQ(render("{{ x is nosuchtest }}"),
            "PARSE ERROR: t.jinja:1:9: no test named 'nosuchtest'");
  EXPECT_EQ(render("x\n{% include 'other.jinja' %}"),
            "PARSE ERROR: t.jinja:2:4: unsupported statement 'include'");
  EXPECT_EQ(render("{% if x %}never closed"),
            "PARSE ERROR: t.jinja:1:23: unexpected end of template, expected 'elif'");
  EXPECT_EQ(render("{{ 'open string }}"),
            "PARSE ERROR: t.jinja:1:4: the string literal is never closed");
  EXPECT_EQ(render("{{ x "), "PARSE ERROR: t.jinja:1:1: the tag is never closed with '}}'");
  EXPECT_EQ(render("{{ 1 / 0 }}"), "RENDER ERROR: t.jinja:1:6: division by zero");
  EXPECT_EQ(render("{{ 'abc'.nomethod() }}"),
            "RENDER ERROR: t.jinja:1:9: 'str' object has no method 'nomethod'");
  EXPECT_EQ(render("{% set x = 1 %}{% set x.y = 2 %}"),
            "RENDER ERROR: t.jinja:1:19: cannot assign attribute 'y' on 'x', which is not a "
            "namespace()");
  EXPECT_EQ(render("{{ 9223372036854775807 + 1 }}"),
            "RENDER ERROR: t.jinja:1:24: integer overflow in '+' (Weft's integers are 64-bit)");
}

TEST(JinjaEvalTest, HostileInputFailsCleanly) {
  // fuzz_chat_template (UBSan): int() of a float or numeric string beyond 64 bits converted it
  // with undefined behaviour; it is an error naming the value now.
  EXPECT_NE(render("{{ 7.26483e109 | int }}").find("int: 7.26483e+109 does not fit in a 64-bit"),
            std::string::npos);
  EXPECT_NE(render("{{ '-1e300' | int }}").find("does not fit in a 64-bit integer"),
            std::string::npos);
  EXPECT_EQ(render("{{ 2.9 | int }} {{ '-3.7' | int }} {{ '12' | int }}"), "2 -3 12");
  std::string deep = std::string(5000, '(') + "1" + std::string(5000, ')');
  EXPECT_NE(render("{{ " + deep + " }}").find("nests too deeply"), std::string::npos);
  EXPECT_EQ(render("{{ " + std::string(5000, '(') + "1 }}"),
            "PARSE ERROR: t.jinja:1:5006: unexpected '}'");
  EXPECT_NE(render("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}").find("nest deeper"),
            std::string::npos);
  EXPECT_NE(render("{{ range(1000000) | length }}").find("range too big"), std::string::npos);
  // Work that stays within every other bound but would run for ages: nested loops, and a
  // macro that calls itself twice (2^60 calls within the depth bound).
  EXPECT_NE(render("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}"
                   "{% endfor %}")
                .find("more than 1000000 loop iterations and macro calls"),
            std::string::npos);
  EXPECT_NE(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                   "{% endmacro %}{{ f(60) }}")
                .find("more than 1000000 loop iterations"),
            std::string::npos);
  EXPECT_NE(render("{{ 'x' * 1000000000000 }}").find("256 MiB"), std::string::npos);
  EXPECT_NE(render("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] "
                   "%}{% endfor %}{{ ns.l }}")
                .find("nest deeper than 128"),
            std::string::npos);
  EXPECT_NE(render("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ "
                   "ns.s %}{% endfor %}")
                .find("beyond 256 MiB"),
            std::string::npos);
  EXPECT_NE(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}").find("cannot hold"),
            std::string::npos);
  EXPECT_NE(render("{{ [1] | tojson(indent=100000) }}").find("larger than 1024"),
            std::string::npos);
  EXPECT_EQ(render("{{ [1] | tojson(indent=-3) }}"), "[\n1\n]");
  EXPECT_EQ(render("\xff\xfe{{ '\xc3' }}"), "\xff\xfe\xc3");
  EXPECT_EQ(render("{{ '\xe6\x97' | length }}"), "2");
}

TEST(JinjaEvalTest, ScopesFollowJinja) {
  // set inside a loop does not leak; set inside if does.
  EXPECT_EQ(render("{% set a = 1 %}{% for i in [1] %}{% set a = 2 %}{% endfor %}{{ a }}"), "1");
  EXPECT_EQ(render("{% if true %}{% set a = 2 %}{% endif %}{{ a }}"), "2");
  EXPECT_EQ(
      render("{% for i in [1, 2] %}{% if i == 1 %}{% set a = 5 %}{% endif %}{{ a }};{% endfor %}"),
      "5;;");
}

TEST(JinjaEvalTest, VariablesComeFromRender) {
  Dict vars;
  vars.set("items", Value(List{Value(1), Value(2.5), Value("x")}));
  EXPECT_EQ(render("{{ items | tojson }} {{ items }}", vars), "[1, 2.5, \"x\"] [1, 2.5, 'x']");
}

// Random edits of the real templates (deleted and duplicated ranges, stray tag and bracket
// markers) must parse or fail with a located error, and render or fail cleanly: never crash,
// never throw.
TEST(JinjaEvalTest, MutatedTemplatesNeverCrash) {
  auto cases = read_json_value_file(kFixtures / "conversations.json");
  ASSERT_TRUE(cases.ok());
  const Value* tool_case = nullptr;
  for (const Value& c : cases->as_list()) {
    if (field(c, "name").as_string() == "tools_call_and_result") tool_case = &c;
  }
  ASSERT_NE(tool_case, nullptr);
  static const char* kPieces[] = {"{%",      "%}",       "{{",     "}}",    "{#",     "#}", "(",
                                  ")",       "[",        "]",      "'",     "\"",     "-",  "|",
                                  " endif ", " endfor ", " else ", "\n",    ".",      ":",  "{",
                                  "}",       " is ",     " not ",  "loop.", "[::-1]", " ~ "};
  std::mt19937 rng(1234);
  int rendered = 0, failed = 0;
  for (const char* family : {"qwen3", "gemma3", "llama3", "llama2_chat_format"}) {
    auto file = read_chat_template_file(family_dir(family));
    ASSERT_TRUE(file.ok()) << family << ": " << file.error().what()
                           << " (run scripts/fetch-test-data " << WEFT_BINARY_DIR << ")";
    const std::string original = file->templates[0].second;
    for (int round = 0; round < 400; ++round) {
      std::string text = original;
      int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !text.empty(); ++e) {
        std::size_t at = rng() % text.size();
        std::size_t len = 1 + rng() % 12;
        switch (rng() % 3) {
          case 0:
            text.erase(at, len);
            break;
          case 1:
            text.insert(at, text.substr(at, len));
            break;
          default:
            text.insert(at, kPieces[rng() % std::size(kPieces)]);
        }
      }
      ChatTemplateOptions options;
      options.tools = field(*tool_case, "tools");
      auto t = ChatTemplate::parse(text, "mutant", file->special_tokens);
      if (!t) {
        EXPECT_EQ(std::string(t.error().what()).rfind("mutant:", 0), 0u) << t.error().what();
        ++failed;
        continue;
      }
      auto r = t->render(field(*tool_case, "messages"), options);
      if (r.ok()) {
        ++rendered;
      } else {
        EXPECT_EQ(std::string(r.error().what()).rfind("mutant", 0), 0u) << r.error().what();
        ++failed;
      }
    }
  }
  std::cout << "mutated templates: " << rendered << " rendered, " << failed << " failed cleanly\n";
  EXPECT_GT(rendered, 0);
  EXPECT_GT(failed, 0);
}

}  // namespace
}  // namespace weft::jinja
