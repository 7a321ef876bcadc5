#include "loaders/safetensors_writer.hpp"

#include <cstdio>
#include <fstream>

namespace weft {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::size_t SafetensorsEntry::nbytes() const {
  std::size_t n = dtype_size(dtype);
  for (const auto d : shape)
    n *= static_cast<std::size_t>(d);
  return n;
}

Result<void> write_safetensors(const std::filesystem::path& path,
                               const std::vector<SafetensorsEntry>& entries,
                               const std::map<std::string, std::string>& metadata,
                               const std::function<Result<TensorView>(std::size_t)>& data) {
  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      first = false;
      header += json_string(key) + ":" + json_string(value);
    }
    header += "}";
  }
  std::size_t offset = 0;
  for (const auto& e : entries) {
    if (header.size() > 1) header += ',';
    header += json_string(e.name) + ":{\"dtype\":\"" + std::string(dtype_name(e.dtype)) +
              "\",\"shape\":[";
    for (std::size_t i = 0; i < e.shape.size(); ++i) {
      if (i > 0) header += ',';
      header += std::to_string(e.shape[i]);
    }
    const std::size_t end = offset + e.nbytes();
    header += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  header += '}';
  header.resize((header.size() + 7) / 8 * 8, ' ');

  const auto temporary = path.string() + ".partial";
  std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
  if (!out) return Error(ErrorCode::kIo, temporary + ": cannot be created");
  unsigned char length[8];
  for (int i = 0; i < 8; ++i)
    length[i] = static_cast<unsigned char>((header.size() >> (8 * i)) & 0xffu);
  out.write(reinterpret_cast<const char*>(length), 8);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  for (std::size_t i = 0; i < entries.size(); ++i) {
    auto view = data(i);
    if (!view) {
      out.close();
      std::filesystem::remove(temporary);
      return view.error();
    }
    if (view->nbytes() != entries[i].nbytes()) {
      out.close();
      std::filesystem::remove(temporary);
      return Error(ErrorCode::kInternal,
                   "tensor \"" + entries[i].name + "\": " + std::to_string(view->nbytes()) +
                       " bytes given, " + std::to_string(entries[i].nbytes()) + " announced");
    }
    out.write(reinterpret_cast<const char*>(view->data),
              static_cast<std::streamsize>(view->nbytes()));
  }
  out.close();
  if (!out) {
    std::filesystem::remove(temporary);
    return Error(ErrorCode::kIo, temporary + ": write failed (disk full?)");
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec)
    return Error(ErrorCode::kIo, path.string() + ": cannot be written (" + ec.message() + ")");
  return {};
}

}  // namespace weft
