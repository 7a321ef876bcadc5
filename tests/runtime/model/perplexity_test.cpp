// weft-tiny's perplexity on the first 16,000 characters of its held-out text must match the
// figure PyTorch computed when the model was trained (models/weft-tiny/eval.json) within 1%:
// this checks the tokenizer, the loader and the forward pass together against a real run.

#include "runtime/model/perplexity.hpp"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <filesystem>

#include "loaders/mapped_file.hpp"
#include "loaders/model_loader.hpp"
#include "loaders/tokenizer_json.hpp"

namespace weft {
namespace {

const std::filesystem::path kModelDir = std::filesystem::path(WEFT_SOURCE_DIR) / "models/weft-tiny";

TEST(Perplexity, WeftTinyMatchesPyTorchOnHeldOutText) {
  simdjson::dom::parser parser;
  auto eval = parser.load((kModelDir / "eval.json").string());
  ASSERT_EQ(eval.error(), simdjson::SUCCESS);
  const double reference = eval["heldout_head_perplexity"].get_double().value();
  const auto reference_tokens = eval["heldout_head_tokens"].get_uint64().value();
  const auto window = eval["window"].get_int64().value();
  const auto stride = eval["stride"].get_int64().value();

  auto loaded = load_model(kModelDir);
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  auto tokenizer = loaders::load_tokenizer(kModelDir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().what();
  auto text = MappedFile::open(kModelDir / "heldout-head.txt");
  ASSERT_TRUE(text.ok());
  auto ids = tokenizer->tokenizer->encode(text->text(), true);
  ASSERT_TRUE(ids.ok());

  cpu::ThreadPool pool(0);
  model::PerplexityOptions options;
  options.window = static_cast<int>(window);
  options.stride = static_cast<int>(stride);
  options.chunk = 100;  // chunking must not change the result
  auto result = model::sliding_window_perplexity(loaded->model, *ids, options, pool);
  ASSERT_TRUE(result.ok()) << result.error().what();
  EXPECT_EQ(result->tokens_scored, reference_tokens);
  EXPECT_NEAR(result->perplexity, reference, 0.01 * reference)
      << "weft " << result->perplexity << " vs PyTorch " << reference;
}

TEST(Perplexity, RefusesWindowsThatLeaveTokensUnscored) {
  auto loaded = load_model(kModelDir);
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  cpu::ThreadPool pool(1);
  std::vector<std::uint32_t> ids = {1, 2, 3, 4};
  model::PerplexityOptions options;
  options.window = 8;
  options.stride = 16;
  auto result = model::sliding_window_perplexity(loaded->model, ids, options, pool);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(std::string(result.error().what()).find("stride 16 is larger than window 8"),
            std::string::npos);

  options.stride = 4;
  options.window = 4096;  // beyond weft-tiny's 1024 positions
  result = model::sliding_window_perplexity(loaded->model, ids, options, pool);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(std::string(result.error().what()).find("max_position_embeddings"), std::string::npos);

  options.window = 8;
  std::vector<std::uint32_t> one = {1};
  EXPECT_FALSE(model::sliding_window_perplexity(loaded->model, one, options, pool).ok());
  std::vector<std::uint32_t> outside = {1, 99999};
  result = model::sliding_window_perplexity(loaded->model, outside, options, pool);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(std::string(result.error().what()).find("99999"), std::string::npos);
}

}  // namespace
}  // namespace weft
