// Chat templates against transformers: every conversation of
// tests/fixtures/chat_templates/conversations.json rendered with each family's real template
// must equal, byte for byte, what apply_chat_template rendered (expected.json, made by
// tests/fixtures/make_chat_template_refs.py); where transformers raised, Weft must fail too.

#include "runtime/text/chat_template.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "loaders/chat_template_file.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;
using jinja::Dict;
using jinja::Value;

const fs::path kFixtures = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/chat_templates";
// The four families' tokenizer_config.json come from their npm packages, which
// scripts/fetch-test-data puts in the build folder (they are not committed);
// llama2_chat_format is a template written for these tests and is committed.
const fs::path kFetched = fs::path(WEFT_BINARY_DIR) / "test-data/tokenizers";

fs::path family_dir(const std::string& family) {
  if (family == "llama2_chat_format") return kFixtures / family;
  const fs::path dir = kFetched / family;
  if (!fs::exists(dir / "tokenizer_config.json")) {
    ADD_FAILURE() << dir / "tokenizer_config.json"
                  << " is missing: run scripts/fetch-test-data " << WEFT_BINARY_DIR;
  }
  return dir;
}

Value read_fixture(const std::string& name) {
  auto v = read_json_value_file(kFixtures / name);
  if (!v) ADD_FAILURE() << v.error().what();
  return v.ok() ? v.value() : Value::none();
}

const Value& field(const Value& dict, std::string_view key) {
  static const Value kMissing;
  const Value* v = dict.is_dict() ? dict.as_dict().find(key) : nullptr;
  return v ? *v : kMissing;
}

ChatTemplateOptions options_of(const Value& c) {
  ChatTemplateOptions options;
  options.add_generation_prompt = field(c, "add_generation_prompt").truthy();
  if (!field(c, "tools").is_undefined()) options.tools = field(c, "tools");
  if (field(c, "kwargs").is_dict()) options.extra = field(c, "kwargs").as_dict();
  return options;
}

// What transformers raised, without the exception type: the text our error must contain when
// the template raised it itself.
std::string raised_message(const std::string& error) {
  const std::string prefix = "TemplateError: ";
  return error.rfind(prefix, 0) == 0 ? error.substr(prefix.size()) : "";
}

void check_family(const std::string& family) {
  Value cases = read_fixture("conversations.json");
  Value expected = field(field(read_fixture("expected.json"), "renders"), family);
  ASSERT_TRUE(expected.is_dict()) << "expected.json has no renders for " << family;
  ASSERT_TRUE(cases.is_list());

  int compared = 0, matched = 0;
  for (const Value& c : cases.as_list()) {
    const std::string name = field(c, "name").as_string();
    const Value& want = field(expected, name);
    if (want.is_undefined()) continue;  // this case is not run for this family
    SCOPED_TRACE(family + "/" + name);
    ++compared;
    ChatTemplateOptions options = options_of(c);
    auto tmpl = load_chat_template(family_dir(family), !options.tools.is_none());
    Result<std::string> got =
        tmpl ? tmpl->render(field(c, "messages"), options) : Result<std::string>(tmpl.error());
    if (!field(want, "error").is_undefined()) {
      const std::string error = field(want, "error").as_string();
      EXPECT_FALSE(got.ok()) << "transformers raised " << error << " but Weft rendered:\n"
                             << (got.ok() ? got.value() : "");
      if (!got.ok()) {
        std::string raised = raised_message(error);
        EXPECT_NE(std::string(got.error().what()).find(raised), std::string::npos)
            << "Weft's error: " << got.error().what() << "\ntransformers: " << error;
        if (std::string(got.error().what()).find(raised) != std::string::npos) ++matched;
      }
      continue;
    }
    ASSERT_TRUE(got.ok()) << got.error().what();
    EXPECT_EQ(got.value(), field(want, "text").as_string());
    if (got.value() == field(want, "text").as_string()) ++matched;
  }
  std::cout << family << ": " << matched << "/" << compared
            << " renders match transformers (errors included)\n";
  EXPECT_GE(compared, 8);
}

TEST(ChatTemplateReferenceTest, Llama3) {
  check_family("llama3");
}
TEST(ChatTemplateReferenceTest, Qwen3) {
  check_family("qwen3");
}
TEST(ChatTemplateReferenceTest, Llama2WithoutTemplate) {
  check_family("llama2");
}
TEST(ChatTemplateReferenceTest, Gemma3) {
  check_family("gemma3");
}
TEST(ChatTemplateReferenceTest, Llama2ChatFormat) {
  check_family("llama2_chat_format");
}

TEST(ChatTemplateFileTest, MissingTemplateNamesTheFile) {
  auto t = load_chat_template(family_dir("llama2"), false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), ErrorCode::kNotFound);
  std::string message = t.error().what();
  EXPECT_NE(message.find("llama2/tokenizer_config.json"), std::string::npos) << message;
  EXPECT_NE(message.find("chat_template"), std::string::npos) << message;
}

TEST(ChatTemplateFileTest, MissingFolder) {
  auto t = load_chat_template(kFixtures / "no-such-model", false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), ErrorCode::kNotFound);
  // The path as given, not the folder above it.
  EXPECT_NE(std::string(t.error().what()).find("no-such-model: no such folder or file"),
            std::string::npos)
      << t.error().what();
}

class TempDir {
 public:
  TempDir() {
    path_ =
        fs::temp_directory_path() /
        ("weft_chat_template_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
         std::to_string(::getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }
  void write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }

 private:
  fs::path path_;
};

Value user_message(const std::string& text) {
  Dict m;
  m.set("role", Value("user"));
  m.set("content", Value(text));
  return Value(jinja::List{Value(std::move(m))});
}

TEST(ChatTemplateFileTest, NamedTemplatesAndTokenObjects) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({
    "bos_token": {"content": "<B>", "lstrip": false, "__type": "AddedToken"},
    "eos_token": "<E>",
    "model_max_length": 1000000000000000019884624838656,
    "chat_template": [
      {"name": "default", "template": "{{ bos_token }}default:{{ messages[0].content }}{{ eos_token }}"},
      {"name": "tool_use", "template": "tools:{{ tools | length }}"}
    ]})");
  auto plain = load_chat_template(dir.path(), false);
  ASSERT_TRUE(plain.ok()) << plain.error().what();
  EXPECT_EQ(plain->render(user_message("hi"), {}).value(), "<B>default:hi<E>");

  auto with_tools = load_chat_template(dir.path() / "tokenizer_config.json", true);
  ASSERT_TRUE(with_tools.ok()) << with_tools.error().what();
  ChatTemplateOptions options;
  options.tools = Value(jinja::List{Value(Dict{}), Value(Dict{})});
  EXPECT_EQ(with_tools->render(user_message("hi"), options).value(), "tools:2");
}

TEST(ChatTemplateFileTest, JinjaFileTakesPrecedence) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"eos_token": "</s>", "chat_template": "from config"})");
  dir.write("chat_template.jinja", "from file {{ eos_token }}\n");
  auto t = load_chat_template(dir.path(), false);
  ASSERT_TRUE(t.ok()) << t.error().what();
  EXPECT_EQ(t->render(user_message("x"), {}).value(), "from file </s>");
}

TEST(ChatTemplateFileTest, JinjaFileBesideAMissingConfig) {
  TempDir dir;
  dir.write("chat_template.jinja", "only {{ messages[0].content }}");
  auto t = load_chat_template(dir.path() / "tokenizer_config.json", false);
  ASSERT_TRUE(t.ok()) << t.error().what();
  EXPECT_EQ(t->render(user_message("x"), {}).value(), "only x");
}

TEST(ChatTemplateFileTest, NoDefaultTemplate) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": [{"name": "rag", "template": "x"}]})");
  auto t = load_chat_template(dir.path(), false);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(std::string(t.error().what()).find("rag"), std::string::npos) << t.error().what();
}

TEST(ChatTemplateFileTest, MalformedConfig) {
  TempDir dir;
  dir.write("tokenizer_config.json", R"({"chat_template": "x", )");
  auto t = load_chat_template(dir.path(), false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.error().code(), ErrorCode::kParse);
  EXPECT_NE(std::string(t.error().what()).find("tokenizer_config.json"), std::string::npos);

  dir.write("tokenizer_config.json", R"({"chat_template": 42})");
  auto wrong_type = load_chat_template(dir.path(), false);
  ASSERT_FALSE(wrong_type.ok());
  EXPECT_NE(std::string(wrong_type.error().what()).find("must be a string"), std::string::npos);
}

TEST(ChatTemplateFileTest, TemplateSyntaxErrorNamesFileLineAndColumn) {
  TempDir dir;
  dir.write(
      "tokenizer_config.json",
      R"({"chat_template": "line one\n{% for m in messages %}{{ m.content | frobnicate }}{% endfor %}"})");
  auto t = load_chat_template(dir.path(), false);
  ASSERT_FALSE(t.ok());
  std::string message = t.error().what();
  EXPECT_NE(message.find("tokenizer_config.json (chat_template \"default\"):2:39:"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("frobnicate"), std::string::npos) << message;
}

TEST(ChatTemplateTest, MessagesMustBeAList) {
  auto t = ChatTemplate::parse("{{ messages }}", "inline", {});
  ASSERT_TRUE(t.ok());
  auto r = t->render(Value("not a list"), {});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(std::string(r.error().what()).find("list"), std::string::npos);
}

TEST(ChatTemplateTest, ExtraKwargsOverrideSpecialTokens) {
  Dict tokens;
  tokens.set("bos_token", Value("<s>"));
  auto t = ChatTemplate::parse("{{ bos_token }}{{ add_generation_prompt }}", "inline", tokens);
  ASSERT_TRUE(t.ok());
  ChatTemplateOptions options;
  EXPECT_EQ(t->render(Value(jinja::List{}), options).value(), "<s>False");
  options.extra.set("bos_token", Value("[B]"));
  options.add_generation_prompt = true;
  EXPECT_EQ(t->render(Value(jinja::List{}), options).value(), "[B]True");
}

}  // namespace
}  // namespace weft
