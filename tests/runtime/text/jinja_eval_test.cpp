// The Jinja subset, feature by feature: each snippet of
// tests/fixtures/chat_templates/jinja_snippets.json rendered by transformers (expected.json,
// "snippets") must render the same here; plus the errors, with their line and column.

#include "runtime/text/jinja_eval.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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
                .find("more than 100000 loop iterations and macro calls"),
            std::string::npos);
  EXPECT_NE(render("{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}"
                   "{% endmacro %}{{ f(60) }}")
                .find("the template ran more than"),
            std::string::npos);
  EXPECT_NE(
      render("{{ 'x' * 1000000000000 }}").find("the repeated string would exceed 1048576 bytes"),
      std::string::npos);
  EXPECT_NE(render("{% set ns = namespace(l=[]) %}{% for i in range(1000) %}{% set ns.l = [ns.l] "
                   "%}{% endfor %}{{ ns.l }}")
                .find("nest deeper than 128"),
            std::string::npos);
  EXPECT_NE(render("{% set ns = namespace(s='ab') %}{% for i in range(100) %}{% set ns.s = ns.s ~ "
                   "ns.s %}{% endfor %}")
                .find("a string would grow beyond 1048576 bytes"),
            std::string::npos);
  EXPECT_NE(render("{% set ns = namespace() %}{% set ns.me = [ns] %}{{ ns }}").find("cannot hold"),
            std::string::npos);
  EXPECT_NE(render("{{ [1] | tojson(indent=100000) }}").find("larger than 1024"),
            std::string::npos);
  EXPECT_EQ(render("{{ [1] | tojson(indent=-3) }}"), "[\n1\n]");
  EXPECT_EQ(render("\xff\xfe{{ '\xc3' }}"), "\xff\xfe\xc3");
  EXPECT_EQ(render("{{ '\xe6\x97' | length }}"), "2");
}

// Every input tests/fuzz found slow (2026-11-26, tests/fixtures/fuzz_findings/chat_template/:
// libFuzzer's `timeout-*` over 10 s, `slow-unit-*` over 5 s under ASan; 41-46 s each for the
// timeouts): loops three deep over 300-character strings, each iteration writing hundreds of
// bytes. Rendered as fuzz_chat_template renders them, each now stops at the limit of
// RenderLimits on the rendered text (1 MiB plus 4 per input byte).
TEST(JinjaEvalTest, FuzzFindingsStopAtTheRenderLimits) {
  const fs::path dir = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/fuzz_findings/chat_template";
  auto cases = read_json_value_file(kFixtures / "conversations.json");
  ASSERT_TRUE(cases.ok());
  const Value* tool_case = nullptr;
  for (const Value& c : cases->as_list()) {
    if (field(c, "name").as_string() == "tools_call_and_result") tool_case = &c;
  }
  ASSERT_NE(tool_case, nullptr);
  Dict special;
  special.set("bos_token", Value("<s>"));
  special.set("eos_token", Value("</s>"));
  int files = 0, limited = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::ifstream in(entry.path(), std::ios::binary);
    const std::string source((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    ++files;
    auto t = ChatTemplate::parse(source, "fuzz", special);
    if (!t) continue;
    ChatTemplateOptions options;
    options.add_generation_prompt = true;
    options.tools = field(*tool_case, "tools");
    auto r = t->render(field(*tool_case, "messages"), options);
    const std::string error = r.ok() ? "" : r.error().what();
    const bool hit = error.find("the rendered text exceeds") != std::string::npos ||
                     error.find("evaluation steps") != std::string::npos ||
                     error.find("loop iterations") != std::string::npos;
    if (hit) ++limited;
    std::cout << name << ": "
              << (r.ok() ? "rendered " + std::to_string(r->size()) + " bytes" : error) << "\n";
    // Each of them wrote text without end: all stop at the output limit.
    EXPECT_NE(error.find("the rendered text exceeds"), std::string::npos)
        << (r.ok() ? "rendered " + std::to_string(r->size()) + " bytes" : error);
  }
  EXPECT_EQ(files, 13);
  EXPECT_EQ(limited, 13);
}

// The limits are per render and name what was hit; a caller may set its own.
TEST(JinjaEvalTest, RenderLimitsNameTheLimitHit) {
  auto t = Template::parse(
      "{% for a in 'abcdefghij' %}{% for b in 'abcdefghij' %}{{ a ~ b }}{% endfor %}{% endfor %}",
      "t.jinja");
  ASSERT_TRUE(t.ok());
  auto whole = t->render({});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(whole->size(), 200u);
  RenderLimits loops;
  loops.max_loop_iterations = 50;
  auto r = t->render({}, loops);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.error().what())
                .find("the template ran more than 50 loop iterations and macro calls"),
            std::string::npos)
      << r.error().what();
  RenderLimits steps;
  steps.max_steps = 300;
  steps.per_input_byte = 0;
  r = t->render({}, steps);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(
      std::string(r.error().what()).find("more than 300 evaluation steps (300 plus 0 per byte"),
      std::string::npos)
      << r.error().what();
  RenderLimits output;
  output.max_output_bytes = 150;
  output.per_input_byte = 0;
  r = t->render({}, output);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.error().what()).find("the rendered text exceeds 150 bytes"),
            std::string::npos)
      << r.error().what();
  // The step and output limits grow with the variables given: 4 per byte by default.
  Dict vars;
  vars.set("long", Value(std::string(1000, 'x')));
  auto echo = Template::parse("{{ long }}{{ long }}", "t.jinja");
  ASSERT_TRUE(echo.ok());
  EXPECT_FALSE(echo->render(vars, output).ok());
  output.per_input_byte = 4;
  EXPECT_TRUE(echo->render(vars, output).ok());
  // A filter is charged for the items it is given: join over a 100,000-item range 20 times.
  auto join = Template::parse(
      "{% for i in range(20) %}{{ range(100000) | join(',') | length }}{% endfor %}", "t.jinja");
  ASSERT_TRUE(join.ok());
  r = join->render({});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.error().what()).find("evaluation steps"), std::string::npos)
      << r.error().what();
  // ... and for the nested values: tojson of 100 dicts of 10 items, 1,000 times.
  List rows;
  for (int i = 0; i < 100; ++i) {
    Dict row;
    for (int k = 0; k < 10; ++k)
      row.set("k" + std::to_string(k), Value(k));
    rows.push_back(Value(std::move(row)));
  }
  Dict table;
  table.set("rows", Value(std::move(rows)));
  auto dump = Template::parse("{% for i in range(1000) %}{% set x = rows | tojson %}{% endfor %}",
                              "t.jinja");
  ASSERT_TRUE(dump.ok());
  r = dump->render(table);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.error().what()).find("evaluation steps"), std::string::npos)
      << r.error().what();
  RenderLimits fewer_loops;
  fewer_loops.max_loop_iterations = 500;
  r = dump->render(table, fewer_loops);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.error().what()).find("more than 500 loop iterations"), std::string::npos)
      << r.error().what();
}

// The defaults are generous for real templates: every real template renders a long
// conversation (with tool calls and tools where the template takes them, else 500 plain
// turns) within a tenth of each limit.
TEST(JinjaEvalTest, RealTemplatesRenderLongConversationsWithinATenthOfTheLimits) {
  auto cases = read_json_value_file(kFixtures / "conversations.json");
  ASSERT_TRUE(cases.ok());
  const Value* tool_case = nullptr;
  for (const Value& c : cases->as_list()) {
    if (field(c, "name").as_string() == "tools_call_and_result") tool_case = &c;
  }
  ASSERT_NE(tool_case, nullptr);
  // 200 rounds of the tool conversation's messages (one system message), ending with a user's.
  const List& base = field(*tool_case, "messages").as_list();
  List with_tools;
  for (int i = 0; i < 200; ++i)
    for (const Value& m : base)
      if (field(m, "role").as_string() != "system" || with_tools.empty()) with_tools.push_back(m);
  while (field(with_tools.back(), "role").as_string() != "user")
    with_tools.pop_back();
  List plain;
  for (int i = 0; i < 1001; ++i) {
    Dict m;
    m.set("role", Value(i % 2 == 0 ? "user" : "assistant"));
    m.set("content", Value("Turn " + std::to_string(i) + ": a few words of text here."));
    plain.push_back(Value(std::move(m)));
  }
  for (const char* family : {"qwen3", "gemma3", "llama3", "llama2_chat_format"}) {
    SCOPED_TRACE(family);
    auto file = read_chat_template_file(family_dir(family));
    ASSERT_TRUE(file.ok()) << file.error().what() << " (run scripts/fetch-test-data "
                           << WEFT_BINARY_DIR << ")";
    for (const auto& [name, source] : file->templates) {
      auto t = ChatTemplate::parse(source, family, file->special_tokens);
      ASSERT_TRUE(t.ok()) << t.error().what();
      int rendered = 0;
      for (bool tools : {true, false}) {
        ChatTemplateOptions options;
        options.add_generation_prompt = true;
        if (tools) options.tools = field(*tool_case, "tools");
        options.limits.max_loop_iterations /= 10;
        options.limits.max_steps /= 10;
        options.limits.max_output_bytes /= 10;
        const List& messages = tools ? with_tools : plain;
        auto r = t->render(Value(messages), options);
        if (!r.ok()) {
          // A template that refuses the conversation (tool roles) must do so by its own
          // raise_exception, not by a limit.
          EXPECT_NE(std::string(r.error().what()).find("raise_exception"), std::string::npos)
              << name << ": " << r.error().what();
          continue;
        }
        EXPECT_GT(r->size(), 20000u) << name;
        std::cout << family << " (" << name << "): " << messages.size() << " messages"
                  << (tools ? " with tools, " : ", ") << r->size()
                  << " bytes rendered within a tenth of the limits\n";
        ++rendered;
      }
      EXPECT_GE(rendered, 1) << name;
    }
  }
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
