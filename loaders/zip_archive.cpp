#include "loaders/zip_archive.hpp"

#include <algorithm>
#include <cstring>

namespace weft {
namespace {

constexpr std::uint32_t kLocalHeaderSig = 0x04034b50;
constexpr std::uint32_t kCentralHeaderSig = 0x02014b50;
constexpr std::uint32_t kEndSig = 0x06054b50;
constexpr std::uint32_t kZip64EndSig = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::size_t kEndSize = 22;
constexpr std::size_t kZip64LocatorSize = 20;
constexpr std::size_t kZip64EndSize = 56;
constexpr std::size_t kCentralHeaderSize = 46;
constexpr std::size_t kLocalHeaderSize = 30;
// The end record sits in the last 22 bytes plus a comment of at most 65535 bytes.
constexpr std::size_t kMaxCommentSize = 0xffff;

// Little-endian reads at a position the caller has already checked to lie inside the file.
std::uint64_t le(const std::byte* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i)
    v = (v << 8) | static_cast<std::uint8_t>(p[i]);
  return v;
}

Error zip_error(const std::filesystem::path& path, const std::string& what) {
  return Error(ErrorCode::kParse, path.string() + ": zip: " + what);
}

// [offset, offset + length) lies inside a file of `size` bytes, without overflow.
bool inside(std::uint64_t offset, std::uint64_t length, std::uint64_t size) {
  return offset <= size && length <= size - offset;
}

struct Directory {
  std::uint64_t entries = 0;
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

Result<Directory> find_directory(const std::filesystem::path& path,
                                 std::span<const std::byte> bytes) {
  const std::size_t n = bytes.size();
  if (n < kEndSize) {
    return zip_error(path, "file is " + std::to_string(n) +
                               " bytes, too short for a ZIP end-of-central-directory record "
                               "(truncated, or not a ZIP file)");
  }
  const std::size_t lowest = n - kEndSize > kMaxCommentSize ? n - kEndSize - kMaxCommentSize : 0;
  std::size_t end = n - kEndSize;
  for (;;) {
    if (le(bytes.data() + end, 4) == kEndSig &&
        le(bytes.data() + end + 20, 2) == n - end - kEndSize) {
      break;
    }
    if (end == lowest) {
      return zip_error(path, "no end-of-central-directory record (truncated, or not a ZIP file)");
    }
    --end;
  }
  const std::byte* e = bytes.data() + end;
  Directory dir{le(e + 10, 2), le(e + 16, 4), le(e + 12, 4)};
  if (le(e + 4, 2) != 0 || le(e + 6, 2) != 0) {
    return zip_error(path, "multi-disk archives are not supported");
  }
  // zip64: the 32-bit fields are saturated and a locator precedes the end record.
  if (end >= kZip64LocatorSize && le(e - kZip64LocatorSize, 4) == kZip64LocatorSig) {
    const std::uint64_t z = le(e - kZip64LocatorSize + 8, 8);
    if (!inside(z, kZip64EndSize, end - kZip64LocatorSize)) {
      return zip_error(path, "zip64 end record offset " + std::to_string(z) +
                                 " lies outside the file of " + std::to_string(n) + " bytes");
    }
    const std::byte* z64 = bytes.data() + z;
    if (le(z64, 4) != kZip64EndSig) {
      return zip_error(path, "no zip64 end record at offset " + std::to_string(z));
    }
    dir = {le(z64 + 32, 8), le(z64 + 48, 8), le(z64 + 40, 8)};
  }
  if (!inside(dir.offset, dir.size, end)) {
    return zip_error(path, "central directory [" + std::to_string(dir.offset) + ", +" +
                               std::to_string(dir.size) + ") lies outside the file of " +
                               std::to_string(n) + " bytes");
  }
  if (dir.entries > dir.size / kCentralHeaderSize) {
    return zip_error(path, "central directory claims " + std::to_string(dir.entries) +
                               " entries in " + std::to_string(dir.size) + " bytes");
  }
  return dir;
}

// Applies the zip64 extra field (id 1) to the saturated 32-bit fields of a central header.
Result<void> apply_zip64_extra(const std::filesystem::path& path, const std::string& name,
                               const std::byte* extra, std::size_t extra_len, std::uint64_t& size,
                               std::uint64_t& compressed, std::uint64_t& local_offset) {
  std::size_t pos = 0;
  while (pos + 4 <= extra_len) {
    const std::uint64_t id = le(extra + pos, 2);
    const std::uint64_t len = le(extra + pos + 2, 2);
    if (len > extra_len - pos - 4) break;
    if (id == 1) {
      const std::byte* field = extra + pos + 4;
      std::size_t used = 0;
      for (std::uint64_t* value : {&size, &compressed, &local_offset}) {
        if (*value != 0xffffffff) continue;
        if (used + 8 > len) {
          return zip_error(path, "entry \"" + name + "\": zip64 extra field is too short");
        }
        *value = le(field + used, 8);
        used += 8;
      }
      return {};
    }
    pos += 4 + len;
  }
  if (size == 0xffffffff || compressed == 0xffffffff || local_offset == 0xffffffff) {
    return zip_error(path,
                     "entry \"" + name + "\": sizes need a zip64 extra field, which is missing");
  }
  return {};
}

}  // namespace

Result<ZipArchive> ZipArchive::open(const std::filesystem::path& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped) return mapped.error();
  ZipArchive archive;
  archive.file_ = std::make_shared<const MappedFile>(std::move(mapped.value()));
  const auto bytes = archive.file_->bytes();
  const std::uint64_t n = bytes.size();
  auto dir = find_directory(path, bytes);
  if (!dir) return dir.error();
  std::uint64_t pos = dir->offset;
  const std::uint64_t dir_end = dir->offset + dir->size;
  archive.entries_.reserve(static_cast<std::size_t>(dir->entries));
  for (std::uint64_t i = 0; i < dir->entries; ++i) {
    const std::string where = "central directory entry " + std::to_string(i);
    if (!inside(pos, kCentralHeaderSize, dir_end)) {
      return zip_error(path, where + " runs past the end of the directory");
    }
    const std::byte* h = bytes.data() + pos;
    if (le(h, 4) != kCentralHeaderSig) {
      return zip_error(path, where + " at offset " + std::to_string(pos) + " has a bad signature");
    }
    const std::uint64_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2),
                        comment_len = le(h + 32, 2);
    if (!inside(pos + kCentralHeaderSize, name_len + extra_len + comment_len, dir_end)) {
      return zip_error(path, where + ": name and extra fields run past the end of the directory");
    }
    ZipEntry entry;
    entry.name.assign(reinterpret_cast<const char*>(h + kCentralHeaderSize), name_len);
    const std::uint64_t flags = le(h + 8, 2);
    entry.encrypted = (flags & 1) != 0;
    entry.method = static_cast<std::uint16_t>(le(h + 10, 2));
    std::uint64_t compressed = le(h + 20, 4), size = le(h + 24, 4), local = le(h + 42, 4);
    if (auto ok = apply_zip64_extra(path, entry.name, h + kCentralHeaderSize + name_len, extra_len,
                                    size, compressed, local);
        !ok) {
      return ok.error();
    }
    const std::string named = "entry \"" + entry.name + "\"";
    if (entry.method == 0 && compressed != size) {
      return zip_error(path, named + " is stored but its sizes differ (" +
                                 std::to_string(compressed) + " vs " + std::to_string(size) + ")");
    }
    if (!inside(local, kLocalHeaderSize, n)) {
      return zip_error(path, named + ": local header offset " + std::to_string(local) +
                                 " lies outside the file of " + std::to_string(n) + " bytes");
    }
    const std::byte* l = bytes.data() + local;
    if (le(l, 4) != kLocalHeaderSig) {
      return zip_error(path, named + ": no local header at offset " + std::to_string(local));
    }
    // The local header's own name and extra lengths place the data (torch pads the local
    // extra field so that tensor data is 64-byte aligned).
    entry.data_offset = local + kLocalHeaderSize + le(l + 26, 2) + le(l + 28, 2);
    entry.size = compressed;
    if (!inside(entry.data_offset, entry.size, n)) {
      return zip_error(path, named + ": data [" + std::to_string(entry.data_offset) + ", +" +
                                 std::to_string(entry.size) + ") runs past the end of the file (" +
                                 std::to_string(n) + " bytes; truncated?)");
    }
    archive.entries_.push_back(std::move(entry));
    pos += kCentralHeaderSize + name_len + extra_len + comment_len;
  }
  return archive;
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  auto it = std::find_if(entries_.begin(), entries_.end(),
                         [&](const ZipEntry& e) { return e.name == name; });
  return it == entries_.end() ? nullptr : &*it;
}

Result<std::span<const std::byte>> ZipArchive::data(const ZipEntry& entry) const {
  if (entry.encrypted) {
    return Error(ErrorCode::kUnsupported,
                 path().string() + ": zip: entry \"" + entry.name + "\" is encrypted");
  }
  if (entry.method != 0) {
    return Error(ErrorCode::kUnsupported,
                 path().string() + ": zip: entry \"" + entry.name + "\" is compressed (method " +
                     std::to_string(entry.method) +
                     "); only stored entries are read, as torch.save writes them");
  }
  return file_->bytes().subspan(static_cast<std::size_t>(entry.data_offset),
                                static_cast<std::size_t>(entry.size));
}

}  // namespace weft
