// CpuSeq2SeqBackend: one StepBatch that encodes two new sequences and runs the decoder for
// them and for a sequence encoded in an earlier step gives the logits Seq2SeqSession gives
// each alone; malformed seq2seq slices are errors naming the slice.

#include "runtime/model/seq2seq_backend.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "loaders/model_loader.hpp"
#include "runtime/model/seq2seq_session.hpp"

namespace weft::model {
namespace {

const std::filesystem::path kT5 =
    std::filesystem::path(WEFT_SOURCE_DIR) / "tests" / "fixtures" / "seq2seq" / "t5";

LoadedModel load_t5() {
  LoadOptions options;
  options.allow_seq2seq = true;
  auto loaded = load_model(kT5, options);
  EXPECT_TRUE(loaded) << loaded.error().what();
  return std::move(loaded.value());
}

// The session's logits for `steps` decoder tokens after its encoder pass over `source`.
std::vector<float> session_logits(const Seq2SeqModel& model,
                                  const std::vector<std::int32_t>& source,
                                  const std::vector<std::int32_t>& decoder) {
  Seq2SeqSession session(model, 4, 64, 2);
  auto ids = session.start({source}, static_cast<int>(decoder.size()));
  EXPECT_TRUE(ids) << ids.error().what();
  std::vector<float> logits;
  for (auto token : decoder)
    EXPECT_TRUE(session.step(*ids, {token}, logits));
  return logits;  // the last step's
}

TEST(Seq2SeqBackend, EncoderPassesAndDecodeTokensInOneStepMatchTheSession) {
  const LoadedModel loaded = load_t5();
  const Seq2SeqModel& model = *loaded.seq2seq;
  CpuSeq2SeqBackend backend(model, model.kv_layout(4), 64, 2);
  const std::vector<std::int32_t> a{13, 7, 42, 99, 5, 120, 1}, b{8, 9, 1}, c{200, 3, 45, 6, 1};
  const int V = model.spec().vocab_size;

  // Step 1: `a` alone (encoder pass + start token). Pages: a's cross 0-1, self 2.
  StepBatch first;
  first.tokens = {0};
  first.positions = {0};
  SequenceSlice sa;
  sa.token_count = 1;
  sa.page_table = {2};
  sa.cross_page_table = {0, 1};
  sa.cross_length = static_cast<int>(a.size());
  sa.encoder_tokens = a;
  first.sequences = {sa};
  std::vector<float> logits;
  ASSERT_TRUE(backend.forward(first, logits));
  const int a_next =
      static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());

  // Step 2: a's second token beside b's and c's encoder passes and start tokens.
  StepBatch second;
  second.tokens = {a_next, 0, 0};
  second.positions = {1, 0, 0};
  sa.token_begin = 0;
  sa.encoder_tokens.clear();
  SequenceSlice sb;
  sb.token_begin = 1;
  sb.token_count = 1;
  sb.page_table = {4};
  sb.cross_page_table = {3};
  sb.cross_length = static_cast<int>(b.size());
  sb.encoder_tokens = b;
  SequenceSlice sc = sb;
  sc.token_begin = 2;
  sc.page_table = {7};
  sc.cross_page_table = {5, 6};
  sc.cross_length = static_cast<int>(c.size());
  sc.encoder_tokens = c;
  second.sequences = {sa, sb, sc};
  ASSERT_TRUE(backend.forward(second, logits));
  ASSERT_EQ(logits.size(), 3u * static_cast<std::size_t>(V));
  const std::vector<std::vector<float>> want{session_logits(model, a, {0, a_next}),
                                             session_logits(model, b, {0}),
                                             session_logits(model, c, {0})};
  for (std::size_t s = 0; s < 3; ++s) {
    for (int v = 0; v < V; ++v) {
      ASSERT_NEAR(logits[s * static_cast<std::size_t>(V) + static_cast<std::size_t>(v)],
                  want[s][static_cast<std::size_t>(v)], 1e-4)
          << "slice " << s << " token " << v;
    }
  }
}

TEST(Seq2SeqBackend, MalformedSlicesAreErrorsNamingTheSlice) {
  StepBatch batch;
  batch.tokens = {0, 0};
  batch.positions = {0, 0};
  SequenceSlice good;
  good.token_count = 1;
  good.page_table = {0};
  good.cross_page_table = {1};
  good.cross_length = 3;
  good.encoder_tokens = {4, 5, 6};
  SequenceSlice no_cross = good;
  no_cross.token_begin = 1;
  no_cross.cross_page_table.clear();
  batch.sequences = {good, no_cross};
  auto split = split_seq2seq_step(batch);
  ASSERT_FALSE(split);
  EXPECT_NE(std::string(split.error().what()).find("slice 1: "), std::string::npos)
      << split.error().what();

  SequenceSlice wrong_length = good;
  wrong_length.token_begin = 1;
  wrong_length.cross_length = 2;
  batch.sequences = {good, wrong_length};
  split = split_seq2seq_step(batch);
  ASSERT_FALSE(split);
  EXPECT_NE(std::string(split.error().what()).find("3 encoder tokens but a cross length of 2"),
            std::string::npos)
      << split.error().what();

  batch.sequences = {good};
  batch.tokens = {0};
  batch.positions = {0};
  split = split_seq2seq_step(batch);
  ASSERT_TRUE(split);
  EXPECT_EQ(split->encode.lengths, std::vector<int>{3});
  EXPECT_EQ(split->decode_cross.size(), 1u);
}

}  // namespace
}  // namespace weft::model
