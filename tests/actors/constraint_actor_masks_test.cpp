// ConstraintActor::masks: a step's masks go into one buffer (offsets per id, -1 for an id
// without a constraint), and with a mask pool the rows computed on its threads give the same
// masks as the strand alone.

#include <gtest/gtest.h>

#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_future.hpp>
#include <fstream>
#include <sstream>

#include "actors/constraint_actor.hpp"
#include "runtime/grammar/constraint_compiler.hpp"
#include "runtime/grammar/tokenizer_vocab.hpp"
#include "weft/runtime.hpp"

namespace weft::actors {
namespace {

namespace asio = boost::asio;

constexpr int kVocab = 8192;  // weft-tiny's

grammar::ConstraintCompiler tiny_compiler() {
  return grammar::ConstraintCompiler(
      [] {
        std::ifstream in(std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny/tokenizer.json");
        std::ostringstream text;
        text << in.rdbuf();
        return grammar::vocab_from_tokenizer_json(text.str());
      },
      {0});
}

// Masks of 12 sequences over three schemas, two steps (the second after each accepted its
// mask's first allowed token), with or without a pool.
std::vector<StepMasks> two_steps(asio::thread_pool* pool) {
  Runtime runtime(RuntimeOptions{.worker_threads = 2});
  ConstraintActor actor(runtime.executor(), kVocab, /*jump_forward=*/false, pool);
  grammar::ConstraintCompiler compiler = tiny_compiler();
  const char* schemas[] = {
      R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})",
      R"({"type":"array","items":{"enum":["red","green","blue"]}})",
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":8}}})"};
  std::vector<std::uint64_t> ids;
  for (std::uint64_t id = 1; id <= 12; ++id) {
    ResponseFormat f;
    f.type = ResponseFormat::Type::kJsonSchema;
    f.source = schemas[id % 3];
    auto compiled = compiler.compile(f);
    EXPECT_TRUE(compiled) << compiled.error().what();
    if (!compiled) return {};
    actor.add(id, *compiled);
    ids.push_back(id);
  }
  ids.insert(ids.begin() + 5, 99);  // no constraint: offset -1
  std::vector<StepMasks> steps;
  steps.push_back(actor.masks(ids, asio::use_future).get());
  std::vector<AcceptedToken> tokens;
  const StepMasks& first = steps.back();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (first.offsets[i] < 0) continue;
    for (int t = 0; t < kVocab; ++t) {
      if ((first.words[static_cast<std::size_t>(first.offsets[i]) + t / 32] >> (t % 32)) & 1u) {
        tokens.push_back({ids[i], t, 0});
        break;
      }
    }
  }
  EXPECT_EQ(tokens.size(), 12u);
  const AcceptResult accepted = actor.accept(tokens, asio::use_future).get();
  for (const auto& v : accepted.verdicts)
    EXPECT_NE(v.verdict, grammar::TokenConstraint::Verdict::kRejected);
  steps.push_back(actor.masks(ids, asio::use_future).get());
  runtime.shutdown();
  return steps;
}

TEST(ConstraintActorMasksTest, OneBufferPerStepAndThePoolGivesTheSameMasks) {
  const std::vector<StepMasks> serial = two_steps(nullptr);
  asio::thread_pool pool(3);
  const std::vector<StepMasks> pooled = two_steps(&pool);
  ASSERT_EQ(serial.size(), 2u);
  ASSERT_EQ(pooled.size(), 2u);
  const std::size_t words = (kVocab + 31) / 32;
  for (std::size_t s = 0; s < 2; ++s) {
    EXPECT_EQ(serial[s].words_per_mask, static_cast<int>(words));
    ASSERT_EQ(serial[s].offsets.size(), 13u);
    EXPECT_EQ(serial[s].offsets[5], -1);
    EXPECT_EQ(serial[s].words.size(), 12 * words);
    EXPECT_EQ(serial[s].offsets, pooled[s].offsets);
    EXPECT_EQ(serial[s].words, pooled[s].words) << "step " << s;
    EXPECT_EQ(serial[s].computed, 12);
    EXPECT_EQ(pooled[s].computed, 12);
    for (std::size_t i = 0; i < serial[s].offsets.size(); ++i) {
      if (serial[s].offsets[i] < 0) continue;
      bool any = false;
      for (std::size_t w = 0; w < words; ++w)
        any = any || serial[s].words[static_cast<std::size_t>(serial[s].offsets[i]) + w] != 0;
      EXPECT_TRUE(any) << "step " << s << " row " << i << " allows nothing";
    }
  }
  // The steps differ: every sequence moved on.
  EXPECT_NE(serial[0].words, serial[1].words);
}

}  // namespace
}  // namespace weft::actors
