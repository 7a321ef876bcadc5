#include "loaders/mapped_file.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace weft {
namespace {

std::filesystem::path temp_file(const std::string& name, const std::string& contents) {
  auto path = std::filesystem::temp_directory_path() / name;
  std::ofstream(path, std::ios::binary) << contents;
  return path;
}

TEST(MappedFile, MapsTheWholeFile) {
  auto path = temp_file("weft_mapped_file_test.bin", "hello, weft");
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok()) << file.error().what();
  EXPECT_EQ(file->size(), 11u);
  EXPECT_EQ(file->text(), "hello, weft");
  std::filesystem::remove(path);
}

TEST(MappedFile, EmptyFileHasNoBytes) {
  auto path = temp_file("weft_mapped_file_empty.bin", "");
  auto file = MappedFile::open(path);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ(file->size(), 0u);
  EXPECT_TRUE(file->text().empty());
  std::filesystem::remove(path);
}

TEST(MappedFile, MissingFileNamesThePath) {
  auto file = MappedFile::open("/nonexistent/weft/model.safetensors");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(std::string(file.error().what()).find("/nonexistent/weft/model.safetensors"),
            std::string::npos);
}

TEST(MappedFile, DirectoryIsRefused) {
  auto file = MappedFile::open(std::filesystem::temp_directory_path());
  ASSERT_FALSE(file.ok());
  EXPECT_NE(std::string(file.error().what()).find("is a directory"), std::string::npos);
}

TEST(MappedFile, MoveKeepsTheMapping) {
  auto path = temp_file("weft_mapped_file_move.bin", "abc");
  auto file = MappedFile::open(path).value();
  MappedFile moved = std::move(file);
  EXPECT_EQ(moved.text(), "abc");
  EXPECT_EQ(file.size(), 0u);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace weft
