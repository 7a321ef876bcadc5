// safetensors: zero-copy views of every dtype, sharded folders, and each way a file can be
// bad (each an error naming the file and the tensor, never a crash).

#include "loaders/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

namespace weft {
namespace {

namespace fs = std::filesystem;

fs::path scratch_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("weft_safetensors_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// header JSON + data bytes, with the 8-byte little-endian header length in front.
std::string file_bytes(const std::string& header, const std::string& data,
                       std::uint64_t claimed_len = 0) {
  std::uint64_t len = claimed_len ? claimed_len : header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &len, 8);
  return out + header + data;
}

fs::path write(const fs::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string open_error(const fs::path& path) {
  auto file = SafetensorsFile::open(path);
  EXPECT_FALSE(file.ok()) << path;
  return file.ok() ? std::string() : std::string(file.error().what());
}

void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << message << " lacks " << p;
}

TEST(Safetensors, ViewsEveryDtypeWithoutCopying) {
  const auto dir = scratch_dir("dtypes");
  const std::string header = R"({"__metadata__":{"format":"pt"},)"
                             R"("f32":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("f16":{"dtype":"F16","shape":[1],"data_offsets":[8,10]},)"
                             R"("bf16":{"dtype":"BF16","shape":[1],"data_offsets":[10,12]},)"
                             R"("i8":{"dtype":"I8","shape":[1],"data_offsets":[12,13]},)"
                             R"("u8":{"dtype":"U8","shape":[1],"data_offsets":[13,14]},)"
                             R"("b":{"dtype":"BOOL","shape":[2],"data_offsets":[14,16]},)"
                             R"("i32":{"dtype":"I32","shape":[1],"data_offsets":[16,20]},)"
                             R"("i64":{"dtype":"I64","shape":[1,1],"data_offsets":[20,28]},)"
                             R"("f64":{"dtype":"F64","shape":[],"data_offsets":[28,36]},)"
                             R"("empty":{"dtype":"F32","shape":[0,4],"data_offsets":[36,36]}})";
  std::string data(36, '\0');
  const float two[2] = {1.5f, -2.0f};
  std::memcpy(data.data(), two, 8);
  const std::int64_t big = -1234567890123;
  std::memcpy(data.data() + 20, &big, 8);
  const double pi = 3.25;
  std::memcpy(data.data() + 28, &pi, 8);
  auto file = SafetensorsFile::open(write(dir / "all.safetensors", file_bytes(header, data)));
  ASSERT_TRUE(file.ok()) << file.error().what();
  EXPECT_EQ((*file)->tensors().size(), 10u);
  EXPECT_EQ((*file)->metadata().at("format"), "pt");
  const auto* f32 = (*file)->find("f32");
  ASSERT_NE(f32, nullptr);
  // The header is not padded here, so the data may be misaligned: read it bytewise.
  float second = 0;
  std::memcpy(&second, f32->data + 4, 4);
  EXPECT_EQ(second, -2.0f);
  std::int64_t big_read = 0;
  std::memcpy(&big_read, (*file)->find("i64")->data, 8);
  EXPECT_EQ(big_read, big);
  EXPECT_EQ((*file)->find("i64")->shape, (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ((*file)->find("f64")->numel(), 1);  // a scalar
  double pi_read = 0;
  std::memcpy(&pi_read, (*file)->find("f64")->data, 8);
  EXPECT_EQ(pi_read, 3.25);
  EXPECT_EQ((*file)->find("empty")->numel(), 0);
  for (auto [name, dtype] :
       {std::pair{"f16", DType::kF16}, std::pair{"bf16", DType::kBF16}, std::pair{"i8", DType::kI8},
        std::pair{"u8", DType::kU8}, std::pair{"b", DType::kBool}, std::pair{"i32", DType::kI32}}) {
    EXPECT_EQ((*file)->find(name)->dtype, dtype) << name;
  }
  // A view keeps the mapping alive after the file object is gone.
  TensorView kept = *f32;
  file = Error(ErrorCode::kInternal, "dropped");
  float first = 0;
  std::memcpy(&first, kept.data, 4);
  EXPECT_EQ(first, 1.5f);
}

TEST(Safetensors, MissingFileIsAnErrorNamingIt) {
  expect_mentions(open_error("/nonexistent/weft/model.safetensors"),
                  {"/nonexistent/weft/model.safetensors"});
}

TEST(Safetensors, FileShorterThanTheLengthPrefix) {
  const auto dir = scratch_dir("short");
  expect_mentions(open_error(write(dir / "m.safetensors", "abc")), {"m.safetensors", "truncated"});
}

TEST(Safetensors, HeaderLengthBeyondTheFile) {
  const auto dir = scratch_dir("header_len");
  const auto path = write(dir / "m.safetensors", file_bytes("{}", "", 4096));
  expect_mentions(open_error(path), {"m.safetensors", "header length 4096"});
}

TEST(Safetensors, TruncatedDataRegion) {
  const auto dir = scratch_dir("truncated");
  const std::string header = R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})";
  const auto path = write(dir / "m.safetensors", file_bytes(header, std::string(10, '\0')));
  expect_mentions(open_error(path), {"m.safetensors", "\"w\"", "outside the data region"});
}

TEST(Safetensors, OverlappingTensors) {
  const auto dir = scratch_dir("overlap");
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  const auto path = write(dir / "m.safetensors", file_bytes(header, std::string(12, '\0')));
  expect_mentions(open_error(path), {"m.safetensors", "\"a\"", "\"b\"", "overlap"});
}

TEST(Safetensors, ShapeThatDisagreesWithTheByteSpan) {
  const auto dir = scratch_dir("size");
  const std::string header = R"({"w":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,8]}})";
  const auto path = write(dir / "m.safetensors", file_bytes(header, std::string(8, '\0')));
  expect_mentions(open_error(path), {"\"w\"", "BF16 [3, 2] needs 12"});
}

TEST(Safetensors, UnknownDtypeBadJsonAndBadFields) {
  const auto dir = scratch_dir("bad_fields");
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"w":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}})",
       "unknown dtype \"F8_E4M3\""},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]})", "not a JSON object"},
      {R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "non-negative integers"},
      {R"({"w":{"dtype":"F32","shape":"4","data_offsets":[0,4]}})", "\"shape\""},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", "data_offsets"},
      {R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", "outside the data region"},
      {R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
       "too large"},
      {R"({"w":7})", "entry must be an object"},
      {R"([1,2])", "not a JSON object"},
  };
  int i = 0;
  for (const auto& [header, expected] : cases) {
    const auto path = write(dir / ("case" + std::to_string(i++) + ".safetensors"),
                            file_bytes(header, std::string(8, '\0')));
    expect_mentions(open_error(path), {path.filename().string(), expected});
  }
}

const fs::path kSharded =
    fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/models/llama_dynamic_sharded_f32";

TEST(WeightFiles, OpensAShardedFolderThroughItsIndex) {
  auto set = WeightFiles::open_folder(kSharded);
  ASSERT_TRUE(set.ok()) << set.error().what();
  EXPECT_EQ(set->files().size(), 9u);
  EXPECT_EQ(set->names().size(), 21u);
  const auto* embed = set->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (std::vector<std::int64_t>{256, 64}));
  EXPECT_NE(set->origin("lm_head.weight").find("model-00008-of-00009.safetensors"),
            std::string::npos);
}

TEST(WeightFiles, IndexNamingATensorItsShardLacks) {
  const auto dir = scratch_dir("bad_index");
  for (const auto& entry : fs::directory_iterator(kSharded)) {
    if (entry.path().filename().string().rfind("model-", 0) == 0) {
      fs::copy_file(entry.path(), dir / entry.path().filename());
    }
  }
  write(dir / "model.safetensors.index.json",
        R"({"weight_map":{"lm_head.weight":"model-00001-of-00009.safetensors"}})");
  auto set = WeightFiles::open_folder(dir);
  ASSERT_FALSE(set.ok());
  expect_mentions(set.error().what(), {"model.safetensors.index.json", "lm_head.weight",
                                       "model-00001-of-00009.safetensors"});
  write(dir / "model.safetensors.index.json",
        R"({"weight_map":{"lm_head.weight":"model-00010-of-00009.safetensors"}})");
  set = WeightFiles::open_folder(dir);
  ASSERT_FALSE(set.ok());
  expect_mentions(set.error().what(), {"model-00010-of-00009.safetensors"});
  write(dir / "model.safetensors.index.json", R"({"weight_map":{"x":"../../etc/passwd"}})");
  set = WeightFiles::open_folder(dir);
  ASSERT_FALSE(set.ok());
  expect_mentions(set.error().what(), {"outside the model folder"});
  write(dir / "model.safetensors.index.json", R"({"weights":{}})");
  set = WeightFiles::open_folder(dir);
  ASSERT_FALSE(set.ok());
  expect_mentions(set.error().what(), {"\"weight_map\""});
}

TEST(WeightFiles, FolderWithoutWeights) {
  const auto dir = scratch_dir("no_weights");
  auto set = WeightFiles::open_folder(dir);
  ASSERT_FALSE(set.ok());
  EXPECT_EQ(set.error().code(), ErrorCode::kNotFound);
  expect_mentions(set.error().what(), {dir.string(), "model.safetensors"});
}

TEST(WeightFiles, TensorInTwoFiles) {
  const auto dir = scratch_dir("duplicate");
  const std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  auto a = write(dir / "a.safetensors", file_bytes(header, std::string(4, '\0')));
  auto b = write(dir / "b.safetensors", file_bytes(header, std::string(4, '\0')));
  auto set = WeightFiles::open_files({a, b});
  ASSERT_FALSE(set.ok());
  expect_mentions(set.error().what(), {"b.safetensors", "\"w\"", "a.safetensors"});
}

// Random damage to a real checkpoint: every result is an error or a file whose views all lie
// inside the mapping; nothing crashes (run under ASan/UBSan in CI's sanitizer job).
TEST(Safetensors, SurvivesCorruptedAndTruncatedCopies) {
  const auto dir = scratch_dir("fuzz");
  std::ifstream in(
      fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/models/llama_gqa_f32/model.safetensors",
      std::ios::binary);
  const std::string original((std::istreambuf_iterator<char>(in)), {});
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, original.data(), 8);
  std::mt19937 rng(5);
  int opened = 0, rejected = 0;
  for (int round = 0; round < 300; ++round) {
    std::string bytes = original;
    if (round % 3 == 0) {
      bytes.resize(std::uniform_int_distribution<std::size_t>(0, original.size())(rng));
    } else {
      const int flips = 1 + round % 4;
      for (int f = 0; f < flips; ++f) {
        const auto at = std::uniform_int_distribution<std::size_t>(0, 8 + header_len - 1)(rng);
        bytes[at] = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
      }
    }
    const auto path = write(dir / "m.safetensors", bytes);
    auto file = SafetensorsFile::open(path);
    if (!file.ok()) {
      ++rejected;
      EXPECT_NE(std::string(file.error().what()).find("m.safetensors"), std::string::npos);
      continue;
    }
    ++opened;
    // Touch every byte of every view: a view outside the mapping would fault here.
    unsigned sum = 0;
    for (const auto& [name, view] : (*file)->tensors()) {
      for (std::size_t b = 0; b < view.nbytes(); ++b)
        sum += static_cast<unsigned>(view.data[b]);
    }
    volatile unsigned sink = sum;  // keeps the reads from being optimised away
    (void)sink;
  }
  EXPECT_GT(rejected, 100);  // most damage must be caught
  EXPECT_GT(opened + rejected, 0);
}

}  // namespace
}  // namespace weft
