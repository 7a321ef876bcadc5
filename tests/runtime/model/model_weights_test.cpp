// Model::create's checks of the weights against the spec, fused layouts, and forward's
// rejection of bad step batches.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "loaders/model_loader.hpp"
#include "loaders/model_spec_file.hpp"
#include "tests/runtime/model/reference_fixture.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;

void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << message << " lacks " << p;
}

// The fixture's weights, with some tensors replaced or removed.
struct EditableWeights {
  std::shared_ptr<WeightFiles> files;
  std::map<std::string, TensorView> replaced;
  std::set<std::string> removed;

  model::WeightLookup lookup() const {
    return {[this](const std::string& name) -> const TensorView* {
              if (removed.count(name)) return nullptr;
              if (auto it = replaced.find(name); it != replaced.end()) return &it->second;
              return files->find(name);
            },
            [this](const std::string& name) {
              return replaced.count(name) ? std::string("edited.safetensors") : files->origin(name);
            },
            "fixture"};
  }
};

struct Loaded {
  model::ModelSpec spec;
  EditableWeights weights;
};

Loaded open_fixture(const std::string& name) {
  const auto dir = testing::fixture_dir(name);
  auto spec = read_model_spec(default_spec_dir() / "llama.json", dir / "config.json");
  if (!spec) throw spec.error();
  auto files = WeightFiles::open_folder(dir);
  if (!files) throw files.error();
  return {spec.value(), {std::make_shared<WeightFiles>(std::move(files.value())), {}, {}}};
}

const std::string kQ = "model.layers.1.self_attn.q_proj.weight";

TEST(ModelWeights, AbsentTensorIsNamed) {
  auto f = open_fixture("llama_gqa_f32");
  f.weights.removed.insert(kQ);
  auto m = model::Model::create(f.spec, f.weights.lookup());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.error().code(), ErrorCode::kNotFound);
  expect_mentions(m.error().what(), {"fixture", kQ, "LlamaForCausalLM", "absent"});
}

TEST(ModelWeights, ShapeThatDisagreesWithTheSpec) {
  auto f = open_fixture("llama_gqa_f32");
  f.weights.replaced[kQ] = make_f32_tensor({32, 64}, std::vector<float>(32 * 64));
  auto m = model::Model::create(f.spec, f.weights.lookup());
  ASSERT_FALSE(m.ok());
  expect_mentions(m.error().what(), {"edited.safetensors", kQ, "[32, 64]", "expects [64, 64]"});
}

TEST(ModelWeights, DtypeThatIsNotAFloat) {
  auto f = open_fixture("llama_gqa_f32");
  TensorView ints = make_f32_tensor({64, 64}, std::vector<float>(64 * 64));
  ints.dtype = DType::kI32;
  f.weights.replaced[kQ] = ints;
  auto m = model::Model::create(f.spec, f.weights.lookup());
  ASSERT_FALSE(m.ok());
  expect_mentions(m.error().what(), {"edited.safetensors", kQ, "I32", "F32, F16 or BF16"});
}

// A tensor whose data is not aligned to its element size (legal in safetensors when the
// header is not padded) is copied, not read misaligned, and computes the same logits.
TEST(ModelWeights, MisalignedTensorGivesTheSameLogits) {
  auto f = open_fixture("llama_gqa_f32");
  auto shifted = f;
  const TensorView* q = f.weights.files->find(kQ);
  auto buffer = std::make_shared<std::vector<std::byte>>(q->nbytes() + 1);
  std::memcpy(buffer->data() + 1, q->data, q->nbytes());
  TensorView odd = *q;
  odd.data = buffer->data() + 1;
  odd.owner = buffer;
  shifted.weights.replaced[kQ] = odd;
  auto a_model = model::Model::create(f.spec, f.weights.lookup());
  auto b_model = model::Model::create(shifted.spec, shifted.weights.lookup());
  ASSERT_TRUE(a_model.ok() && b_model.ok());
  cpu::ThreadPool pool(1);
  std::vector<float> a, b;
  for (auto* m : {&a_model.value(), &b_model.value()}) {
    model::KvCache kv(m->kv_layout(4), 2);
    auto ok = m->forward({{5, 17, 200}, {0, 1, 2}, {{0, 3, {0}, true}}}, kv,
                         m == &a_model.value() ? a : b, pool);
    ASSERT_TRUE(ok) << ok.error().what();
  }
  EXPECT_EQ(a, b);
}

TEST(ModelWeights, TruncatedShardInAModelFolder) {
  const auto src = testing::fixture_dir("llama_gqa_f32");
  const auto dir = fs::temp_directory_path() / "weft_model_truncated";
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (auto name : {"config.json", "generation_config.json"})
    fs::copy_file(src / name, dir / name);
  {
    std::ifstream in(src / "model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(dir / "model.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  auto loaded = load_model(dir);
  ASSERT_FALSE(loaded.ok());
  expect_mentions(loaded.error().what(), {"model.safetensors", "outside the data region"});
}

// Concatenating q, k, v (and gate, up) into fused matrices must not change the logits: the
// fused qkv_layout and gate_up blocks are exercised on real weights.
TEST(ModelWeights, FusedQkvAndGateUpGiveTheSameLogits) {
  auto f = open_fixture("llama_gqa_f32");
  auto fused = f;
  fused.spec.qkv_layout = model::QkvLayout::kFused;
  fused.spec.tensors.qkv = "layers.{layer}.qkv";
  fused.spec.tensors.gate_up = "layers.{layer}.gate_up";
  auto concat = [&](std::initializer_list<std::string> names) {
    std::vector<float> values;
    std::int64_t rows = 0, cols = 0;
    for (const auto& n : names) {
      const TensorView* t = f.weights.files->find(n);
      values.insert(values.end(), t->as<float>(), t->as<float>() + t->numel());
      rows += t->shape[0];
      cols = t->shape[1];
    }
    return make_f32_tensor({rows, cols}, std::move(values));
  };
  for (int l = 0; l < f.spec.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l);
    fused.weights.replaced["layers." + std::to_string(l) + ".qkv"] =
        concat({p + ".self_attn.q_proj.weight", p + ".self_attn.k_proj.weight",
                p + ".self_attn.v_proj.weight"});
    fused.weights.replaced["layers." + std::to_string(l) + ".gate_up"] =
        concat({p + ".mlp.gate_proj.weight", p + ".mlp.up_proj.weight"});
  }
  auto plain_model = model::Model::create(f.spec, f.weights.lookup());
  auto fused_model = model::Model::create(fused.spec, fused.weights.lookup());
  ASSERT_TRUE(plain_model.ok()) << plain_model.error().what();
  ASSERT_TRUE(fused_model.ok()) << fused_model.error().what();
  cpu::ThreadPool pool(2);
  std::vector<float> a, b;
  for (auto* m : {&plain_model.value(), &fused_model.value()}) {
    model::KvCache kv(m->kv_layout(4), 8);
    model::StepBatch step{{5, 17, 200, 3, 9}, {0, 1, 2, 3, 4}, {{0, 5, {0, 1}, true}}};
    auto ok = m->forward(step, kv, m == &plain_model.value() ? a : b, pool);
    ASSERT_TRUE(ok) << ok.error().what();
  }
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i)
    EXPECT_NEAR(a[i], b[i], 1e-5) << i;
}

// Rope with interleaved pairs on q/k rows permuted from half-split order (row i -> 2i,
// row i + d/2 -> 2i + 1 within each head) is the same computation: Meta's and Hugging Face's
// Llama checkpoints differ exactly by this permutation. Checks the interleaved path end to end.
TEST(ModelWeights, InterleavedRopeOnPermutedRowsGivesTheSameLogits) {
  auto f = open_fixture("llama_gqa_f32");
  auto inter = f;
  inter.spec.rope.order = model::RopeOrder::kInterleaved;
  const std::int64_t d = f.spec.head_dim;
  auto permute = [&](const std::string& name) {
    const TensorView* t = f.weights.files->find(name);
    const std::int64_t rows = t->shape[0], cols = t->shape[1];
    std::vector<float> out(static_cast<std::size_t>(rows * cols));
    for (std::int64_t head = 0; head < rows / d; ++head) {
      for (std::int64_t i = 0; i < d; ++i) {
        const std::int64_t to = i < d / 2 ? 2 * i : 2 * (i - d / 2) + 1;
        std::memcpy(out.data() + (head * d + to) * cols, t->as<float>() + (head * d + i) * cols,
                    static_cast<std::size_t>(cols) * sizeof(float));
      }
    }
    inter.weights.replaced[name] = make_f32_tensor({rows, cols}, std::move(out));
  };
  for (int l = 0; l < f.spec.num_layers; ++l) {
    permute("model.layers." + std::to_string(l) + ".self_attn.q_proj.weight");
    permute("model.layers." + std::to_string(l) + ".self_attn.k_proj.weight");
  }
  auto half_model = model::Model::create(f.spec, f.weights.lookup());
  auto inter_model = model::Model::create(inter.spec, inter.weights.lookup());
  ASSERT_TRUE(half_model.ok()) << half_model.error().what();
  ASSERT_TRUE(inter_model.ok()) << inter_model.error().what();
  cpu::ThreadPool pool(2);
  std::vector<float> a, b;
  for (auto* m : {&half_model.value(), &inter_model.value()}) {
    model::KvCache kv(m->kv_layout(4), 8);
    model::StepBatch step{{5, 17, 200, 3, 9, 44}, {0, 1, 2, 3, 4, 5}, {{0, 6, {0, 1}, true}}};
    auto ok = m->forward(step, kv, m == &half_model.value() ? a : b, pool);
    ASSERT_TRUE(ok) << ok.error().what();
  }
  ASSERT_EQ(a.size(), b.size());
  float max_diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
  EXPECT_LT(max_diff, 1e-4f);
  // And the two orders really differ on unpermuted weights (the test is not vacuous).
  auto wrong = model::Model::create(inter.spec, f.weights.lookup());
  ASSERT_TRUE(wrong.ok());
  model::KvCache kv(wrong->kv_layout(4), 8);
  std::vector<float> c;
  ASSERT_TRUE(wrong->forward({{5, 17, 200, 3, 9, 44}, {0, 1, 2, 3, 4, 5}, {{0, 6, {0, 1}, true}}},
                             kv, c, pool));
  float wrong_diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    wrong_diff = std::max(wrong_diff, std::fabs(a[i] - c[i]));
  EXPECT_GT(wrong_diff, 1e-2f);
}

TEST(ModelForward, RejectsBadStepBatches) {
  auto loaded = load_model(testing::fixture_dir("llama_gqa_f32"));
  ASSERT_TRUE(loaded.ok()) << loaded.error().what();
  const auto& m = loaded->model;
  cpu::ThreadPool pool(1);
  model::KvCache kv(m.kv_layout(4), 2);
  std::vector<float> logits;
  const std::vector<std::pair<model::StepBatch, std::string>> cases{
      {{{300}, {0}, {{0, 1, {0}, false}}}, "token id 300 is outside the vocabulary"},
      {{{5}, {8}, {{0, 1, {0, 1}, false}}}, "position 8 is beyond its page table"},
      {{{5}, {0}, {{0, 1, {7}, false}}}, "page id 7"},
      {{{5, 6}, {0}, {{0, 2, {0}, false}}}, "2 tokens but 1 positions"},
      {{{5, 6}, {0, 1}, {{0, 1, {0}, false}}}, "cover 1 of 2 tokens"},
      {{{5}, {0}, {{0, 3, {0}, false}}}, "token range outside the batch"},
  };
  for (const auto& [batch, expected] : cases) {
    auto ok = m.forward(batch, kv, logits, pool);
    ASSERT_FALSE(ok.ok()) << expected;
    expect_mentions(ok.error().what(), {expected});
  }
  model::KvCache wrong({1, 1, 8, 4}, 2);
  auto ok = m.forward({{5}, {0}, {{0, 1, {0}, false}}}, wrong, logits, pool);
  ASSERT_FALSE(ok.ok());
  expect_mentions(ok.error().what(), {"KV cache layout"});
}

TEST(KvCache, CountsPagesExactly) {
  model::KvCache kv({2, 2, 4, 3}, 3);
  EXPECT_EQ(kv.free_pages(), 3);
  EXPECT_EQ(kv.pages_for(7), 3);
  auto a = kv.allocate_page(), b = kv.allocate_page(), c = kv.allocate_page();
  ASSERT_TRUE(a && b && c);
  EXPECT_FALSE(kv.allocate_page().has_value());
  EXPECT_EQ(kv.free_pages(), 0);
  kv.release_page(*b);
  EXPECT_EQ(kv.allocate_page(), b);
  EXPECT_THROW(kv.release_page(3), std::out_of_range);
  // Layer blocks of different pages and layers never overlap.
  EXPECT_EQ(kv.layer_block(1, 0) - kv.layer_block(0, 0), 2 * 2 * 2 * 3 * 4);
  EXPECT_EQ(kv.layer_block(0, 1) - kv.layer_block(0, 0), 2 * 2 * 3 * 4);
}

}  // namespace
}  // namespace weft
