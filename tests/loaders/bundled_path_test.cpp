#include "loaders/bundled_path.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace weft {
namespace {

namespace fs = std::filesystem;

// A build tree copied without its source tree: <root>/tree/{config/models, build/release/bin}.
class BundledPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test and process: ctest runs these tests in parallel processes.
    root_ = fs::temp_directory_path() /
            ("weft_bundled_path_" +
             std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "_" +
             std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_ / "tree" / "config" / "models");
    fs::create_directories(root_ / "tree" / "build" / "release" / "bin");
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(BundledPathTest, TheSourceTreeComesFirst) {
  EXPECT_EQ(find_bundled_path("config/models", root_ / "tree", "/elsewhere/bin/weft"),
            root_ / "tree" / "config" / "models");
}

TEST_F(BundledPathTest, AMissingSourceTreeFallsBackToTheFoldersAboveTheExecutable) {
  EXPECT_EQ(find_bundled_path("config/models", "/no/such/source",
                              root_ / "tree" / "build" / "release" / "bin" / "weft"),
            root_ / "tree" / "config" / "models");
}

TEST_F(BundledPathTest, NotFoundAnywhereNamesTheSourceTreePath) {
  EXPECT_EQ(find_bundled_path("models/weft-tiny", "/no/such/source",
                              root_ / "tree" / "build" / "release" / "bin" / "weft"),
            fs::path("/no/such/source/models/weft-tiny"));
  EXPECT_EQ(find_bundled_path("models/weft-tiny", "/no/such/source", fs::path()),
            fs::path("/no/such/source/models/weft-tiny"));
}

TEST(BundledPath, FindsTheSpecFilesOfThisTree) {
  EXPECT_TRUE(fs::exists(bundled_path("config/models") / "llama.json"));
}

}  // namespace
}  // namespace weft
