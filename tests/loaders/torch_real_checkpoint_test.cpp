// Checkpoints written by real torch.save (tests/fixtures/make_torch_pickles.py, run on a
// machine with torch): they load bitwise like safetensors of the same weights, and a model
// folder holding only pytorch_model.bin (or its shards) loads like one holding safetensors.
// Every test skips, saying how to make the files, when tests/fixtures/pickle/torch is absent.

#include <gtest/gtest.h>

#include <filesystem>

#include "loaders/model_loader.hpp"
#include "loaders/safetensors.hpp"
#include "loaders/torch_checkpoint.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;

const fs::path kTorchDir = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/pickle/torch";

#define SKIP_WITHOUT_TORCH_FIXTURES()                                       \
  if (!fs::exists(kTorchDir / "versions.json")) {                           \
    GTEST_SKIP() << kTorchDir.string()                                      \
                 << " is absent: make it where torch is installed with\n"   \
                    "  python3 tests/fixtures/make_torch_pickles.py --out " \
                    "tests/fixtures/pickle/torch";                          \
  }

std::string bytes_of(const TensorView& v) {
  return {reinterpret_cast<const char*>(v.data), v.nbytes()};
}

void expect_same(const TensorView& got, const TensorView& want, const std::string& name) {
  EXPECT_EQ(got.dtype, want.dtype) << name;
  EXPECT_EQ(got.shape, want.shape) << name;
  EXPECT_EQ(bytes_of(got), bytes_of(want)) << name;
}

TEST(TorchRealCheckpoint, EveryDtypeLoadsBitwiseLikeSafetensors) {
  SKIP_WITHOUT_TORCH_FIXTURES();
  auto twin = SafetensorsFile::open(kTorchDir / "tensors.safetensors");
  ASSERT_TRUE(twin.ok()) << twin.error().what();
  for (const char* file : {"tensors.bin", "tensors_p4.bin"}) {
    SCOPED_TRACE(file);
    auto checkpoint = TorchCheckpoint::open(kTorchDir / file);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().what();
    ASSERT_EQ(checkpoint.value()->tensors().size(), twin.value()->tensors().size());
    for (const auto& [name, want] : twin.value()->tensors()) {
      const TensorView* got = checkpoint.value()->find(name);
      ASSERT_NE(got, nullptr) << name;
      expect_same(*got, want, name);
    }
    // rows_of_big is a view two rows into big's storage: same bytes, no copy.
    EXPECT_EQ(checkpoint.value()->find("rows_of_big")->data,
              checkpoint.value()->find("big")->data + 12 * sizeof(float));
  }
}

TEST(TorchRealCheckpoint, NonContiguousTensorIsRefused) {
  SKIP_WITHOUT_TORCH_FIXTURES();
  auto checkpoint = TorchCheckpoint::open(kTorchDir / "transposed.bin");
  ASSERT_FALSE(checkpoint.ok());
  const std::string message = checkpoint.error().what();
  EXPECT_NE(message.find("tensor \"w\""), std::string::npos) << message;
  EXPECT_NE(message.find("stride [1, 4] of shape [4, 3] is not contiguous"), std::string::npos)
      << message;
}

TEST(TorchRealCheckpoint, BinFoldersLoadLikeTheSafetensorsFolder) {
  SKIP_WITHOUT_TORCH_FIXTURES();
  auto want = WeightFiles::open_folder(kTorchDir / "llama_safetensors");
  ASSERT_TRUE(want.ok()) << want.error().what();
  for (const char* folder : {"llama_bin", "llama_bin_sharded"}) {
    SCOPED_TRACE(folder);
    auto got = WeightFiles::open_folder(kTorchDir / folder);
    ASSERT_TRUE(got.ok()) << got.error().what();
    EXPECT_TRUE(got->files().empty());
    EXPECT_EQ(got->torch_files().size(), std::string(folder) == "llama_bin" ? 1u : 3u);
    ASSERT_EQ(got->names(), want->names());
    for (const auto& name : want->names())
      expect_same(*got->find(name), *want->find(name), name);
  }
}

TEST(TorchRealCheckpoint, LoadModelReadsABinOnlyFolder) {
  SKIP_WITHOUT_TORCH_FIXTURES();
  auto reference = load_model(kTorchDir / "llama_safetensors");
  ASSERT_TRUE(reference.ok()) << reference.error().what();
  for (const char* folder : {"llama_bin", "llama_bin_sharded"}) {
    SCOPED_TRACE(folder);
    auto loaded = load_model(kTorchDir / folder);
    ASSERT_TRUE(loaded.ok()) << loaded.error().what();
    EXPECT_EQ(loaded->spec_file, reference->spec_file);
    EXPECT_EQ(loaded->model.spec().vocab_size, reference->model.spec().vocab_size);
    EXPECT_FALSE(loaded->weights->torch_files().empty());
    for (const auto& name : reference->weights->names())
      expect_same(*loaded->weights->find(name), *reference->weights->find(name), name);
  }
}

}  // namespace
}  // namespace weft
