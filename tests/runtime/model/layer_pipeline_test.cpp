// Pipeline stages in one process (runtime/model/layer_pipeline.hpp): a model cut into layer
// ranges gives the whole model's logits bit for bit (the same kernels in the same order), on
// every fixture and zoo model, whether the stages share one Model or each loads only its
// layers; and the micro-batch split.

#include "runtime/model/layer_pipeline.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "loaders/model_loader.hpp"

namespace weft::model {
namespace {

namespace fs = std::filesystem;

// Two sequences: a prefill (every row's logits for the first), then decode steps.
StepBatch prefill() {
  StepBatch b;
  b.tokens = {5, 17, 42, 99, 3, 7, 11, 13};
  b.positions = {0, 1, 2, 3, 4, 0, 1, 2};
  b.sequences.push_back({0, 5, {0, 1}, true});
  b.sequences.push_back({5, 3, {2, 3}, false});
  return b;
}

StepBatch decode(int step) {
  StepBatch b;
  b.tokens = {21 + step, 30 + step};
  b.positions = {5 + step, 3 + step};
  b.sequences.push_back({0, 1, {0, 1}, false});
  b.sequences.push_back({1, 1, {2, 3}, false});
  return b;
}

std::vector<fs::path> model_dirs() {
  std::vector<fs::path> out;
  for (const char* root : {"tests/fixtures/models", "tests/fixtures/zoo"}) {
    const fs::path dir = fs::path(WEFT_SOURCE_DIR) / root;
    if (!fs::exists(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (fs::exists(e.path() / "config.json")) out.push_back(e.path());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

void expect_same_logits(const fs::path& dir, bool stage_models) {
  SCOPED_TRACE(dir.filename().string() + (stage_models ? " (stage models)" : " (one model)"));
  auto whole = load_model(dir);
  ASSERT_TRUE(whole) << whole.error().what();
  const Model& model = whole->model;
  const int L = model.spec().num_layers;
  ASSERT_GE(L, 2);
  const int page_size = 4, pages = 4;
  KvCache kv(model.kv_layout(page_size), pages);
  cpu::ThreadPool pool(1);

  std::vector<LoadedModel> parts;
  parts.reserve(2);  // the stages refer to these models: they must not move
  std::vector<std::unique_ptr<StageForward>> stages;
  const int cut = (L + 1) / 2;  // the planner's split for two stages
  const LayerRange ranges[] = {{0, cut}, {cut, L - cut}};
  for (int s = 0; s < 2; ++s) {
    const Model* holder = &model;
    if (stage_models) {
      LoadOptions options;
      options.pipeline_parallel_size = 2;
      options.pipeline_stage = s;
      auto part = load_model(dir, options);
      ASSERT_TRUE(part) << part.error().what();
      parts.push_back(std::move(part.value()));
      EXPECT_EQ(parts.back().model.first_layer(), ranges[s].begin);
      EXPECT_EQ(parts.back().model.layer_count(), ranges[s].count);
      EXPECT_EQ(parts.back().model.kv_layout(page_size).num_layers, ranges[s].count);
    }
    stages.push_back(std::make_unique<CpuStage>(stage_models ? parts.back().model : *holder,
                                                ranges[s], model.kv_layout(page_size), pages, 1));
  }
  auto pipeline = LayerPipeline::create(std::move(stages));
  ASSERT_TRUE(pipeline) << pipeline.error().what();
  std::vector<float> want, got;
  for (int step = 0; step < 4; ++step) {
    const StepBatch b = step == 0 ? prefill() : decode(step - 1);
    ASSERT_TRUE(model.forward(b, kv, want, pool));
    auto ok = (*pipeline)->forward(b, got);
    ASSERT_TRUE(ok) << ok.error().what();
    ASSERT_EQ(got.size(), static_cast<std::size_t>(b.logit_rows()) * model.spec().vocab_size);
    EXPECT_EQ(got, want) << "step " << step;
  }
}

TEST(LayerPipeline, TwoStagesOfOneModelMatchTheWholeModel) {
  const auto dirs = model_dirs();
  ASSERT_FALSE(dirs.empty());
  for (const auto& dir : dirs)
    expect_same_logits(dir, /*stage_models=*/false);
}

TEST(LayerPipeline, StagesLoadingOnlyTheirLayersMatchTheWholeModel) {
  for (const auto& dir : model_dirs())
    expect_same_logits(dir, /*stage_models=*/true);
}

TEST(LayerPipeline, RefusesRangesThatDoNotCoverTheModel) {
  EXPECT_TRUE(check_stage_ranges({{0, 2}, {2, 3}}, 5));
  auto gap = check_stage_ranges({{0, 2}, {3, 2}}, 5);
  ASSERT_FALSE(gap);
  EXPECT_STREQ(gap.error().what(),
               "pipeline stage 1 holds layers [3, 5), but the next layer to run is 2");
  auto short_of = check_stage_ranges({{0, 2}}, 5);
  ASSERT_FALSE(short_of);
  EXPECT_STREQ(short_of.error().what(), "pipeline stages hold layers [0, 2) of 5");
}

TEST(LayerPipeline, AStageFromALaterLayerNeedsTheHiddenState) {
  auto whole = load_model(fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/models/llama_gqa_f32");
  ASSERT_TRUE(whole) << whole.error().what();
  CpuStage second(whole->model, {1, whole->model.spec().num_layers - 1}, whole->model.kv_layout(4),
                  4, 1);
  std::vector<float> out;
  auto bad = second.forward(decode(0), {}, out);
  ASSERT_FALSE(bad);
  EXPECT_NE(std::string(bad.error().what()).find("hidden values from the stage before, got 0"),
            std::string::npos)
      << bad.error().what();
}

StepBatch three_sequences() {
  StepBatch b;
  b.tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  b.positions = {0, 1, 2, 3, 4, 5, 0, 0, 1, 2};
  b.sequences.push_back({0, 6, {0, 1}, false});
  b.sequences.push_back({6, 1, {2}, true});
  b.sequences.push_back({7, 3, {3}, true});
  return b;
}

TEST(MicroBatches, SplitsWholeSequencesKeepingTheirOrder) {
  const StepBatch b = three_sequences();
  auto one = split_micro_batches(b, 1);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].tokens, b.tokens);

  auto two = split_micro_batches(b, 2);
  ASSERT_EQ(two.size(), 2u);
  // 10 tokens: the first sequence (6) reaches half; the other two go together.
  EXPECT_EQ(two[0].tokens, (std::vector<std::int32_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(two[1].tokens, (std::vector<std::int32_t>{7, 8, 9, 10}));
  EXPECT_EQ(two[1].positions, (std::vector<std::int32_t>{0, 0, 1, 2}));
  ASSERT_EQ(two[1].sequences.size(), 2u);
  EXPECT_EQ(two[1].sequences[0].token_begin, 0);
  EXPECT_EQ(two[1].sequences[1].token_begin, 1);
  EXPECT_EQ(two[1].sequences[1].page_table, (std::vector<std::int32_t>{3}));
  EXPECT_EQ(two[0].logit_rows() + two[1].logit_rows(), b.logit_rows());

  // More pieces than sequences: one sequence each.
  auto many = split_micro_batches(b, 8);
  ASSERT_EQ(many.size(), 3u);
  for (const auto& mb : many)
    EXPECT_EQ(mb.sequences.size(), 1u);
  EXPECT_EQ(many[2].sequences[0].token_count, 3);
}

TEST(MicroBatches, LogitsOfThePiecesAreTheBatchsLogits) {
  auto whole = load_model(fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/models/qwen2_tied_f32");
  ASSERT_TRUE(whole) << whole.error().what();
  const Model& m = whole->model;
  cpu::ThreadPool pool(1);
  KvCache a(m.kv_layout(4), 4), b(m.kv_layout(4), 4);
  const StepBatch batch = three_sequences();
  std::vector<float> want, got, piece;
  ASSERT_TRUE(m.forward(batch, a, want, pool));
  for (const auto& mb : split_micro_batches(batch, 3)) {
    ASSERT_TRUE(m.forward(mb, b, piece, pool));
    got.insert(got.end(), piece.begin(), piece.end());
  }
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-4f * (1.0f + std::fabs(want[i]))) << i;
}

}  // namespace
}  // namespace weft::model
