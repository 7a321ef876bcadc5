#pragma once
// A read-only memory map of a whole file. Loaders hand out zero-copy views into it; the
// views stay valid while the MappedFile (or a shared_ptr to it) lives.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "weft/error.hpp"

namespace weft {

class MappedFile {
 public:
  // Maps `path` read-only. Errors name the path and the operating system's reason.
  static Result<MappedFile> open(const std::filesystem::path& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const std::filesystem::path& path() const noexcept { return path_; }
  std::size_t size() const noexcept { return size_; }
  std::span<const std::byte> bytes() const noexcept { return {data_, size_}; }
  std::string_view text() const noexcept { return {reinterpret_cast<const char*>(data_), size_}; }

 private:
  void release() noexcept;

  std::filesystem::path path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace weft
