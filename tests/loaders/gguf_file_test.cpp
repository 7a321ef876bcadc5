// The GGUF parser: metadata and descriptors read back from a file the test writer made, and a
// table of corruptions (truncation at every byte of the header, bad magic and version, unknown
// types, impossible counts and lengths, misaligned or out-of-file data) that must each give an
// error naming the byte offset and, where one is at fault, the key or the tensor.
#include "loaders/gguf_file.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include "tests/fixtures/gguf/gguf_writer.hpp"

namespace weft::gguf {
namespace {

using testing::Writer;

std::vector<std::byte> sample_file() {
  Writer w;
  w.add_string("general.architecture", "llama");
  w.add_u32("general.alignment", 32);
  w.add_i32("answer", -42);
  w.add_u64("big", std::uint64_t{1} << 40);
  w.add_f32("ratio", 0.25f);
  w.add_bool("flag", true);
  w.add_strings("names", {"a", "bc", ""});
  w.add_f32s("scores", {1.5f, -2.0f});
  w.add_i32s("types", {1, 3, 6});
  std::vector<float> values(64);
  for (std::size_t i = 0; i < values.size(); ++i)
    values[i] = static_cast<float>(i) - 30.0f;
  w.add_tensor("norm", {64}, TensorType::kF32, values);
  w.add_tensor("blk.0.attn_q.weight", {2, 32}, TensorType::kQ8_0, values);
  return w.bytes();
}

Result<std::shared_ptr<const File>> parse(const std::vector<std::byte>& bytes) {
  return File::parse(bytes, "test.gguf");
}

TEST(GgufFile, ReadsMetadataAndTensorDescriptors) {
  const auto bytes = sample_file();
  auto file = parse(bytes);
  ASSERT_TRUE(file) << file.error().what();
  const File& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(f.get_integer("answer").value(), -42);
  EXPECT_EQ(f.get_integer("big").value(), std::int64_t{1} << 40);
  EXPECT_EQ(f.get_number("ratio").value(), 0.25);
  EXPECT_EQ(f.get_bool("flag").value(), true);
  EXPECT_FALSE(f.get_string("absent").value().has_value());
  const Value* names = f.find("names");
  ASSERT_NE(names, nullptr);
  EXPECT_EQ(names->strings, (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(f.find("scores")->numbers, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ(f.find("types")->numbers, (std::vector<double>{1, 3, 6}));
  // A key of another type is an error naming it.
  auto wrong = f.get_string("answer");
  ASSERT_FALSE(wrong);
  EXPECT_NE(std::string(wrong.error().what()).find("\"answer\" is int32, expected a string"),
            std::string::npos)
      << wrong.error().what();

  ASSERT_EQ(f.tensors().size(), 2u);
  const TensorInfo* q = f.find_tensor("blk.0.attn_q.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->type, TensorType::kQ8_0);
  EXPECT_EQ(q->dims, (std::vector<std::uint64_t>{32, 2}));
  EXPECT_EQ(q->shape(), (std::vector<std::int64_t>{2, 32}));
  EXPECT_EQ(q->data_bytes, 2u * 34u);
  EXPECT_EQ(q->data_offset % 32, 0u);
  const TensorInfo* norm = f.find_tensor("norm");
  float first;
  std::memcpy(&first, f.data(*norm).data(), 4);
  EXPECT_EQ(first, -30.0f);
}

// Offsets of the fields a corruption targets, found by walking the valid file.
struct Layout {
  std::size_t first_kv;         // the first key's length
  std::size_t q_type;           // the Q8_0 tensor's type field
  std::size_t q_offset;         // its data offset field
  std::size_t q_dims;           // its dimension count field
  std::size_t alignment_value;  // general.alignment's value
  std::size_t names_count;      // the "names" array's element count
  std::size_t header_end;       // end of the descriptors
};

Layout layout_of(const std::vector<std::byte>& bytes) {
  auto file = parse(bytes).value();
  Layout l{};
  l.first_kv = 24;
  const TensorInfo* q = file->find_tensor("blk.0.attn_q.weight");
  l.q_dims = q->info_offset + 8 + q->name.size();
  l.q_type = l.q_dims + 4 + 8 * q->dims.size();
  l.q_offset = l.q_type + 4;
  l.header_end = l.q_offset + 8;
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  l.alignment_value = text.find("general.alignment") + std::strlen("general.alignment") + 4;
  l.names_count = text.find("names") + 5 + 4 + 4;
  return l;
}

template <class T>
void poke(std::vector<std::byte>& bytes, std::size_t at, T value) {
  std::memcpy(bytes.data() + at, &value, sizeof(T));
}

struct Corruption {
  const char* name;
  std::function<void(std::vector<std::byte>&, const Layout&)> apply;
  std::vector<std::string> message_has;
};

TEST(GgufFile, CorruptionsGiveNamedErrors) {
  const std::vector<Corruption> table = {
      {"empty file", [](auto& b, auto&) { b.clear(); }, {"at byte 0", "magic", "truncated"}},
      {"bad magic",
       [](auto& b, auto&) { std::memcpy(b.data(), "GGML", 4); },
       {"at byte 0", "bad magic \"GGML\"", "not a GGUF file"}},
      {"version 1",
       [](auto& b, auto&) { poke<std::uint32_t>(b, 4, 1); },
       {"at byte 4", "unsupported GGUF version 1"}},
      {"big-endian", [](auto& b, auto&) { poke<std::uint32_t>(b, 4, 0x03000000); }, {"big-endian"}},
      {"huge tensor count",
       [](auto& b, auto&) { poke<std::uint64_t>(b, 8, ~0ull); },
       {"tensor count", "cannot fit"}},
      {"huge metadata count",
       [](auto& b, auto&) { poke<std::uint64_t>(b, 16, 1ull << 60); },
       {"at byte 16", "metadata count"}},
      {"key longer than the file",
       [](auto& b, auto& l) { poke<std::uint64_t>(b, l.first_kv, 1ull << 62); },
       {"at byte 24", "metadata key #0", "claims"}},
      {"unknown value type",
       [](auto& b, auto& l) { poke<std::uint32_t>(b, l.first_kv + 8 + 20, 99); },
       {"\"general.architecture\"", "unknown value type 99"}},
      {"array count beyond the file",
       [](auto& b, auto& l) { poke<std::uint64_t>(b, l.names_count, 1ull << 40); },
       {"metadata \"names\"", "does not fit"}},
      {"alignment not a power of two",
       [](auto& b, auto& l) { poke<std::uint32_t>(b, l.alignment_value, 24); },
       {"general.alignment", "power of two"}},
      {"unknown tensor type",
       [](auto& b, auto& l) { poke<std::uint32_t>(b, l.q_type, 16); },
       {"tensor \"blk.0.attn_q.weight\"", "IQ2_XXS (type 16)", "supported: F32"}},
      {"tensor type beyond ggml's",
       [](auto& b, auto& l) { poke<std::uint32_t>(b, l.q_type, 1000); },
       {"tensor \"blk.0.attn_q.weight\"", "type 1000"}},
      {"five dimensions",
       [](auto& b, auto& l) { poke<std::uint32_t>(b, l.q_dims, 5); },
       {"tensor \"blk.0.attn_q.weight\"", "5 dimensions"}},
      {"row not whole blocks",
       [](auto& b, auto& l) { poke<std::uint64_t>(b, l.q_dims + 4, 33); },
       {"tensor \"blk.0.attn_q.weight\"", "not whole Q8_0 blocks of 32"}},
      {"zero dimension",
       [](auto& b, auto& l) { poke<std::uint64_t>(b, l.q_dims + 12, 0); },
       {"tensor \"blk.0.attn_q.weight\"", "dimension 1 is 0"}},
      {"huge dimension",
       [](auto& b, auto& l) { poke<std::uint64_t>(b, l.q_dims + 12, 1ull << 45); },
       {"tensor \"blk.0.attn_q.weight\"", "impossibly large"}},
      {"misaligned data offset",
       [](auto& b, auto& l) { poke<std::uint64_t>(b, l.q_offset, 33); },
       {"tensor \"blk.0.attn_q.weight\"", "not a multiple of the alignment 32"}},
      {"data offset past the end",
       [](auto& b, auto& l) { poke<std::uint64_t>(b, l.q_offset, 1ull << 20); },
       {"tensor \"blk.0.attn_q.weight\"", "runs past the end"}},
      {"data cut short",
       [](auto& b, auto&) { b.resize(b.size() - 40); },
       {"tensor \"blk.0.attn_q.weight\"", "(Q8_0, 68 bytes) at byte", "truncated file"}},
  };
  const auto valid = sample_file();
  const Layout l = layout_of(valid);
  for (const Corruption& c : table) {
    auto bytes = valid;
    c.apply(bytes, l);
    auto file = parse(bytes);
    ASSERT_FALSE(file) << c.name << ": parsed without error";
    const std::string message = file.error().what();
    EXPECT_EQ(message.rfind("test.gguf: ", 0), 0u) << c.name << ": " << message;
    for (const auto& part : c.message_has) {
      EXPECT_NE(message.find(part), std::string::npos)
          << c.name << ": \"" << message << "\" lacks \"" << part << "\"";
    }
  }
}

TEST(GgufFile, UnknownTensorTypeIsUnsupportedWithTheDescriptorsOffset) {
  auto bytes = sample_file();
  const Layout l = layout_of(bytes);
  poke<std::uint32_t>(bytes, l.q_type, 10);  // Q2_K
  auto file = parse(bytes);
  ASSERT_FALSE(file);
  EXPECT_EQ(file.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(std::string(file.error().what()).find("at byte " + std::to_string(l.q_type)),
            std::string::npos)
      << file.error().what();
}

// Every cut through the header and descriptors is an error, never a crash or a read past the
// end (the sanitizer builds make the latter loud).
TEST(GgufFile, EveryTruncationOfTheHeaderIsAnError) {
  const auto valid = sample_file();
  const Layout l = layout_of(valid);
  for (std::size_t size = 0; size <= l.header_end + 40; ++size) {
    std::vector<std::byte> cut(valid.begin(), valid.begin() + static_cast<long>(size));
    auto file = parse(cut);
    ASSERT_FALSE(file) << "cut at " << size;
    const std::string message = file.error().what();
    EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                message.find("cannot fit") != std::string::npos ||
                message.find("does not fit") != std::string::npos ||
                message.find("runs past the end") != std::string::npos)
        << "cut at " << size << ": " << message;
  }
}

TEST(GgufFile, RandomByteFlipsNeverCrash) {
  const auto valid = sample_file();
  std::mt19937 rng(1234);
  int errors = 0;
  for (int round = 0; round < 3000; ++round) {
    auto bytes = valid;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const std::size_t at = rng() % std::min<std::size_t>(bytes.size(), 400);
      bytes[at] = static_cast<std::byte>(rng());
    }
    auto file = parse(bytes);
    if (!file) {
      ++errors;
      continue;
    }
    for (const auto& t : (*file)->tensors()) {  // whatever parses stays inside the bytes
      ASSERT_LE(t.data_offset + t.data_bytes, bytes.size());
    }
  }
  EXPECT_GT(errors, 100);
}

TEST(GgufFile, OpenNamesTheFileAndTruncatedFilesOnDisk) {
  const auto dir = std::filesystem::temp_directory_path() / "weft_gguf_file_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "cut.gguf";
  auto bytes = sample_file();
  bytes.resize(bytes.size() - 100);
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
  }
  auto file = File::open(path);
  ASSERT_FALSE(file);
  const std::string message = file.error().what();
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("runs past the end"), std::string::npos) << message;
  auto missing = File::open(dir / "absent.gguf");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code(), ErrorCode::kNotFound);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace weft::gguf
