// PyTorch checkpoints: handmade torch-format archives load bitwise like their safetensors
// twins (single file, protocol 5, zip64, sharded folder), and every hostile pickle or archive
// made by tests/fixtures/make_hostile_pickles.py is refused with a clear error, never a crash.

#include "loaders/torch_checkpoint.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "loaders/pickle_reader.hpp"
#include "loaders/safetensors.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;

const fs::path kPickleDir = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/pickle";
const fs::path kHandmade = kPickleDir / "handmade";
const fs::path kHostile = kPickleDir / "hostile";

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::span<const std::byte> as_bytes(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

fs::path scratch_dir(const std::string& name) {
  auto dir = fs::temp_directory_path() / ("weft_torch_checkpoint_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << message << "\n  lacks: " << p;
}

std::string bytes_of(const TensorView& v) {
  return {reinterpret_cast<const char*>(v.data), v.nbytes()};
}

// Every tensor of `got` equals the one of the same name in `want`: dtype, shape, bytes.
void expect_same_tensors(const std::map<std::string, TensorView>& got,
                         const std::map<std::string, TensorView>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, view] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << name;
    EXPECT_EQ(it->second.dtype, view.dtype) << name;
    EXPECT_EQ(it->second.shape, view.shape) << name;
    EXPECT_EQ(bytes_of(it->second), bytes_of(view)) << name;
  }
}

TEST(TorchCheckpoint, HandmadeArchivesLoadBitwiseLikeSafetensors) {
  auto twin = SafetensorsFile::open(kHandmade / "tiny.safetensors");
  ASSERT_TRUE(twin.ok()) << twin.error().what();
  for (const char* name : {"tiny.bin", "tiny_p5.bin", "tiny_zip64.bin"}) {
    SCOPED_TRACE(name);
    auto checkpoint = TorchCheckpoint::open(kHandmade / name);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().what();
    expect_same_tensors(checkpoint.value()->tensors(), twin.value()->tensors());
    // State dict order, as written.
    ASSERT_EQ(checkpoint.value()->names().size(), 8u);
    EXPECT_EQ(checkpoint.value()->names().front(), "model.layers.0.weight");
    EXPECT_EQ(checkpoint.value()->names().back(), "scalar");
  }
}

TEST(TorchCheckpoint, ViewsPointIntoTheMapWithOffsetsAndAlignment) {
  auto checkpoint = TorchCheckpoint::open(kHandmade / "tiny.bin");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().what();
  const auto& c = *checkpoint.value();
  const TensorView* first = c.find("shared.first");
  const TensorView* second = c.find("shared.second");
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  // Both view one storage; the second starts 4 int64 elements in.
  EXPECT_EQ(second->data, first->data + 4 * sizeof(std::int64_t));
  EXPECT_EQ(second->shape, (std::vector<std::int64_t>{1, 3}));
  EXPECT_EQ(second->as<std::int64_t>()[0], 5);
  EXPECT_EQ(first->as<std::int64_t>()[3], std::int64_t{1} << 40);
  // torch aligns storage entries to 64 bytes; the handmade writer does the same.
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(first->data) % 64, 0u);
  const TensorView* scalar = c.find("scalar");
  ASSERT_NE(scalar, nullptr);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->as<float>()[0], 42.0f);
  // The views keep the map alive after the checkpoint is gone.
  TensorView kept = *c.find("model.layers.0.weight");
  checkpoint = Error(ErrorCode::kInternal, "released");
  EXPECT_EQ(kept.as<float>()[2], 3.0f);
}

TEST(TorchCheckpoint, ShardedFolderLoadsThroughItsIndex) {
  auto set = WeightFiles::open_folder(kHandmade / "sharded");
  ASSERT_TRUE(set.ok()) << set.error().what();
  EXPECT_EQ(set->torch_files().size(), 2u);
  EXPECT_TRUE(set->files().empty());
  auto twin = SafetensorsFile::open(kHandmade / "tiny.safetensors");
  ASSERT_TRUE(twin.ok());
  std::map<std::string, TensorView> got;
  for (const auto& name : set->names())
    got.emplace(name, *set->find(name));
  expect_same_tensors(got, twin.value()->tensors());
  EXPECT_NE(set->origin("scalar").find("pytorch_model-00002-of-00002.bin"), std::string::npos);
}

TEST(TorchCheckpoint, FolderPrefersSafetensorsAndFallsBackToTheBin) {
  const auto dir = scratch_dir("fallback");
  fs::copy_file(kHandmade / "tiny.bin", dir / "pytorch_model.bin");
  auto set = WeightFiles::open_folder(dir);
  ASSERT_TRUE(set.ok()) << set.error().what();
  EXPECT_EQ(set->torch_files().size(), 1u);
  fs::copy_file(kHandmade / "tiny.safetensors", dir / "model.safetensors");
  set = WeightFiles::open_folder(dir);
  ASSERT_TRUE(set.ok()) << set.error().what();
  EXPECT_TRUE(set->torch_files().empty());
  EXPECT_EQ(set->files().size(), 1u);
}

TEST(TorchCheckpoint, IndexNamingATensorItsBinShardLacks) {
  const auto dir = scratch_dir("bad_index");
  for (const auto& entry : fs::directory_iterator(kHandmade / "sharded"))
    fs::copy_file(entry.path(), dir / entry.path().filename());
  std::string index = read_all(dir / "pytorch_model.bin.index.json");
  const std::string from = "\"scalar\": \"pytorch_model-00002-of-00002.bin\"";
  const auto at = index.find(from);
  ASSERT_NE(at, std::string::npos) << index;
  index.replace(at, from.size(), "\"scalar\": \"pytorch_model-00001-of-00002.bin\"");
  std::ofstream(dir / "pytorch_model.bin.index.json", std::ios::binary) << index;
  auto set = WeightFiles::open_folder(dir);
  ASSERT_FALSE(set.ok());
  expect_mentions(set.error().what(), {"pytorch_model.bin.index.json", "\"scalar\"",
                                       "pytorch_model-00001-of-00002.bin"});
}

struct HostileCase {
  const char* file;
  std::vector<std::string> mentions;
};

// Raw pickle streams, read directly by the unpickler.
TEST(PickleReader, RefusesEveryHostileStreamWithAClearError) {
  const std::vector<HostileCase> cases = {
      {"os_system_reduce.pkl",
       {"global 'os.system' at offset 2 is not allowed", "allowed: collections.OrderedDict",
        "torch._utils._rebuild_tensor_v2"}},
      {"posix_system_pickler.pkl", {"global 'posix.system' at offset 2 is not allowed"}},
      {"builtins_eval.pkl", {"global 'builtins.eval' at offset 20 is not allowed"}},
      {"call_storage_type.pkl", {"'torch.FloatStorage'", "cannot be called", "offset 23"}},
      {"oversized_binunicode.pkl", {"string needs 2147483647 bytes but only 4 remain", "offset 2"}},
      {"oversized_binunicode8.pkl", {"string needs 4611686018427387904 bytes", "offset 2"}},
      {"oversized_frame.pkl", {"FRAME of 1099511627776 bytes", "offset 2"}},
      {"oversized_long.pkl", {"integer of 16 bytes", "offset 2"}},
      {"truncated.pkl", {"truncated"}},
      {"no_stop.pkl", {"ended without STOP", "offset 3"}},
      {"deep_nesting.pkl", {"nest deeper than 64 levels", "offset 67"}},
      {"deep_marks.pkl", {"MARKs nest deeper than 64", "offset 66"}},
      {"memo_out_of_range.pkl", {"memo index 5 was never stored", "offset 5"}},
      {"self_append.pkl", {"would contain itself", "offset 7"}},
      {"stack_underflow.pkl", {"REDUCE needs 2 value(s)", "offset 2"}},
      {"protocol_0.pkl", {"does not start with PROTO", "offset 0"}},
      {"protocol_9.pkl", {"protocol 9", "offset 0"}},
      {"inst_opcode.pkl", {"opcode 0x69 ('i') is not supported", "offset 3"}},
      {"bad_persistent_id.pkl", {"persistent id must be ('storage'", "offset 10"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string bytes = read_all(kHostile / c.file);
    ASSERT_FALSE(bytes.empty()) << "fixture missing: run tests/fixtures/make_hostile_pickles.py";
    auto result = read_pickle(as_bytes(bytes), c.file);
    ASSERT_FALSE(result.ok());
    const std::string message = result.error().what();
    EXPECT_EQ(message.rfind(std::string(c.file) + ": pickle: ", 0), 0u) << message;
    for (const auto& m : c.mentions)
      EXPECT_NE(message.find(m), std::string::npos) << message << "\n  lacks: " << m;
  }
}

// Streams too large to commit, built here: each stays within its bound's error.
TEST(PickleReader, StackAndValueCountAreBounded) {
  const std::string proto("\x80\x02", 2);
  auto stack = read_pickle(as_bytes(proto + std::string((1u << 20) + 1, 'N') + "."), "nones");
  ASSERT_FALSE(stack.ok());
  expect_mentions(stack.error().what(), {"nones: pickle: stack grows past 1048576 values"});

  // A list grown batch by batch: the stack never holds more than one batch.
  std::string batches = proto + "]";
  for (int i = 0; i < 5; ++i)
    batches += "(" + std::string(900000, ']') + "e";
  auto values = read_pickle(as_bytes(batches + "."), "lists");
  ASSERT_FALSE(values.ok());
  expect_mentions(values.error().what(), {"lists: pickle: more than 4194304 values"});

  // A global name too long to print whole is cut.
  auto long_name = read_pickle(as_bytes(proto + "c" + std::string(300, 'm') + "\nx\n."), "long");
  ASSERT_FALSE(long_name.ok());
  expect_mentions(long_name.error().what(), {"GLOBAL name is unterminated or longer than 256"});
  std::string module(5000, 'm');
  std::string stack_global =
      "\x80\x04X" + std::string("\x88\x13\x00\x00", 4) + module + "\x8c\x01x\x93.";
  auto cut = read_pickle(as_bytes(stack_global), "stack_global");
  ASSERT_FALSE(cut.ok());
  const std::string message = cut.error().what();
  EXPECT_NE(message.find("global 'mmm"), std::string::npos) << message;
  EXPECT_LT(message.size(), 1500u);
}

// Whole archives, through TorchCheckpoint::open (and so through WeightFiles).
TEST(TorchCheckpoint, RefusesEveryHostileArchiveWithAClearError) {
  const std::vector<HostileCase> cases = {
      {"os_system.bin",
       {"os_system.bin:archive/data.pkl: pickle: global 'os.system' at offset 2 is not allowed"}},
      {"truncated.bin", {"zip: no end-of-central-directory record"}},
      {"legacy.bin", {"legacy (pre-torch-1.6, non-ZIP) checkpoint format is not supported"}},
      {"bad_directory_offset.bin", {"zip: central directory", "lies outside the file"}},
      {"entry_past_eof.bin",
       {"zip: entry \"archive/data.pkl\": local header offset 2147483632 lies outside"}},
      {"entry_size_past_eof.bin",
       {"zip: entry \"archive/data.pkl\": data", "runs past the end of the file"}},
      {"deflated.bin", {"entry \"archive/data.pkl\" is compressed (method 8)"}},
      {"missing_storage.bin",
       {"tensor \"shared.first\"", "storage entry \"archive/data/3\" is missing"}},
      {"past_storage.bin",
       {"tensor \"w\"", "elements [2, +4) lie outside its storage of 4 elements"}},
      {"transposed.bin", {"tensor \"w\"", "stride [1, 2] of shape [2, 2] is not contiguous"}},
      {"short_storage.bin",
       {"storage entry \"archive/data/0\" holds 8 bytes, but 4 F32 elements need 16"}},
      {"not_a_tensor.bin", {"archive/data.pkl: tensor \"w\"", "value is not a tensor"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    ASSERT_TRUE(fs::exists(kHostile / c.file))
        << "fixture missing: run tests/fixtures/make_hostile_pickles.py";
    auto result = TorchCheckpoint::open(kHostile / c.file);
    ASSERT_FALSE(result.ok());
    const std::string message = result.error().what();
    EXPECT_NE(message.find((kHostile / c.file).string()), std::string::npos) << message;
    for (const auto& m : c.mentions)
      EXPECT_NE(message.find(m), std::string::npos) << message << "\n  lacks: " << m;
  }
}

// Every prefix of a valid stream, and every single-byte change of it, is an error or a value,
// never a crash (run under the asan preset to see memory errors).
TEST(PickleReader, SurvivesEveryTruncationAndByteFlipOfAValidStream) {
  const std::string archive = read_all(kHandmade / "tiny.bin");
  ASSERT_FALSE(archive.empty());
  // data.pkl is the first entry: its bytes follow the 64-byte-aligned local header.
  const std::size_t begin = archive.find(std::string("\x80\x02", 2));
  const std::size_t end = archive.find("PK\x03\x04", begin);
  ASSERT_NE(begin, std::string::npos);
  const std::string stream = archive.substr(begin, end - begin);
  ASSERT_TRUE(read_pickle(as_bytes(stream), "valid").ok());
  for (std::size_t n = 0; n < stream.size(); ++n) {
    auto result = read_pickle(as_bytes(stream.substr(0, n)), "cut");
    EXPECT_FALSE(result.ok()) << "prefix of " << n << " bytes";
  }
  for (std::size_t i = 0; i < stream.size(); ++i) {
    for (int flip : {0x01, 0x80, 0xff}) {
      std::string bad = stream;
      bad[i] = static_cast<char>(bad[i] ^ flip);
      (void)read_pickle(as_bytes(bad), "flipped");
    }
  }
}

TEST(TorchCheckpoint, SurvivesEveryTruncationAndByteFlipOfAnArchive) {
  const std::string archive = read_all(kHandmade / "tiny_zip64.bin");
  ASSERT_FALSE(archive.empty());
  const auto dir = scratch_dir("mutations");
  const fs::path path = dir / "m.bin";
  auto check = [&](const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    auto result = TorchCheckpoint::open(path);
    if (result.ok()) {
      // Whatever loaded must lie inside the file.
      for (const auto& [name, view] : result.value()->tensors())
        EXPECT_LE(view.nbytes(), bytes.size()) << name;
    }
    return result.ok();
  };
  for (std::size_t n = 0; n < archive.size(); n += 11)
    EXPECT_FALSE(check(archive.substr(0, n))) << "prefix of " << n << " bytes";
  for (std::size_t i = 0; i < archive.size(); i += 5) {
    std::string bad = archive;
    bad[i] = static_cast<char>(bad[i] ^ 0xff);
    (void)check(bad);
  }
}

}  // namespace
}  // namespace weft
