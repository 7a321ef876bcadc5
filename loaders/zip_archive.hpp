#pragma once
// A read-only ZIP archive over a memory map, for PyTorch's checkpoint container (torch.save
// writes an uncompressed ZIP, zip64 when large). Only stored (uncompressed) entries can be
// read, as views into the map; a deflated or encrypted entry is listed but reading it is an
// error naming the entry. Every offset and length in the directory is checked against the
// file size when the archive is opened, so a bad archive is an error, never a crash.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loaders/mapped_file.hpp"
#include "weft/error.hpp"

namespace weft {

struct ZipEntry {
  std::string name;
  std::uint16_t method = 0;  // 0: stored, 8: deflate, ...
  bool encrypted = false;
  std::uint64_t data_offset = 0;  // of the entry's bytes in the file
  std::uint64_t size = 0;         // compressed size (equal to the real size when stored)
};

class ZipArchive {
 public:
  // Maps `path` and reads its central directory. Errors name the file and, where one is at
  // fault, the entry.
  static Result<ZipArchive> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const noexcept { return file_->path(); }
  const std::vector<ZipEntry>& entries() const noexcept { return entries_; }
  // nullptr when absent.
  const ZipEntry* find(std::string_view name) const;
  // The bytes of a stored entry; an error for a compressed or encrypted one.
  Result<std::span<const std::byte>> data(const ZipEntry& entry) const;
  // The map every data() span points into; keep it alive as the owner of views.
  const std::shared_ptr<const MappedFile>& file() const noexcept { return file_; }

 private:
  std::shared_ptr<const MappedFile> file_;
  std::vector<ZipEntry> entries_;
};

}  // namespace weft
