// ZIP archives: entries of an archive written by Python's zipfile (with a deflated entry), the
// zip64 records torch writes for large files, and an archive comment before the end record.

#include "loaders/zip_archive.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace weft {
namespace {

namespace fs = std::filesystem;

const fs::path kPickleDir = fs::path(WEFT_SOURCE_DIR) / "tests/fixtures/pickle";

std::string text_of(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

TEST(ZipArchive, ListsEveryEntryAndReadsOnlyStoredOnes) {
  auto archive = ZipArchive::open(kPickleDir / "hostile/deflated.bin");
  ASSERT_TRUE(archive.ok()) << archive.error().what();
  ASSERT_EQ(archive->entries().size(), 9u);
  const ZipEntry* order = archive->find("archive/byteorder");
  ASSERT_NE(order, nullptr);
  auto bytes = archive->data(*order);
  ASSERT_TRUE(bytes.ok()) << bytes.error().what();
  EXPECT_EQ(text_of(bytes.value()), "little");
  const ZipEntry* pkl = archive->find("archive/data.pkl");
  ASSERT_NE(pkl, nullptr);
  EXPECT_EQ(pkl->method, 8);
  auto refused = archive->data(*pkl);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(archive->find("archive/nothing"), nullptr);
}

TEST(ZipArchive, ReadsZip64RecordsLikeThePlainArchive) {
  auto plain = ZipArchive::open(kPickleDir / "handmade/tiny.bin");
  auto z64 = ZipArchive::open(kPickleDir / "handmade/tiny_zip64.bin");
  ASSERT_TRUE(plain.ok()) << plain.error().what();
  ASSERT_TRUE(z64.ok()) << z64.error().what();
  ASSERT_EQ(plain->entries().size(), z64->entries().size());
  for (std::size_t i = 0; i < plain->entries().size(); ++i) {
    const auto& a = plain->entries()[i];
    const auto& b = z64->entries()[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(text_of(plain->data(a).value()), text_of(z64->data(b).value())) << a.name;
    EXPECT_EQ(b.data_offset % 64, 0u) << b.name;
  }
}

TEST(ZipArchive, FindsTheEndRecordBeforeAComment) {
  std::ifstream in(kPickleDir / "handmade/tiny.bin", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  const std::string comment = "written by a test; PK\x05\x06 inside a comment is not a record";
  bytes[bytes.size() - 2] = static_cast<char>(comment.size());
  bytes += comment;
  const auto path = fs::temp_directory_path() / "weft_zip_archive_comment.bin";
  std::ofstream(path, std::ios::binary) << bytes;
  auto archive = ZipArchive::open(path);
  ASSERT_TRUE(archive.ok()) << archive.error().what();
  EXPECT_NE(archive->find("archive/data.pkl"), nullptr);
  fs::remove(path);
}

TEST(ZipArchive, NotAZipFile) {
  auto tiny = ZipArchive::open(kPickleDir / "hostile/protocol_9.pkl");
  ASSERT_FALSE(tiny.ok());
  std::string message = tiny.error().what();
  EXPECT_NE(message.find("protocol_9.pkl: zip: file is 4 bytes, too short"), std::string::npos)
      << message;
  auto pickle = ZipArchive::open(kPickleDir / "hostile/os_system_reduce.pkl");
  ASSERT_FALSE(pickle.ok());
  message = pickle.error().what();
  EXPECT_NE(message.find("os_system_reduce.pkl: zip: no end-of-central-directory record"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace weft
