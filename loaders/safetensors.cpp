#include "loaders/safetensors.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>

#include "loaders/mapped_file.hpp"
#include "loaders/torch_checkpoint.hpp"

namespace weft {

struct SafetensorsFile::Mapping {
  MappedFile file;
};

namespace {

Error header_error(const std::filesystem::path& path, const std::string& what) {
  return Error(ErrorCode::kParse, path.string() + ": " + what);
}

// The format caps the header at 100 MB; a larger length means a corrupt or hostile file.
constexpr std::uint64_t kMaxHeaderBytes = std::uint64_t{100} * 1024 * 1024;

}  // namespace

Result<std::shared_ptr<const SafetensorsFile>> SafetensorsFile::open(
    const std::filesystem::path& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped) return mapped.error();
  auto mapping = std::make_shared<Mapping>();
  mapping->file = std::move(mapped.value());
  const auto bytes = mapping->file.bytes();
  if (bytes.size() < 8) {
    return header_error(path, "file is " + std::to_string(bytes.size()) +
                                  " bytes, shorter than the 8-byte header length "
                                  "(truncated or not a safetensors file)");
  }
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);  // little-endian, like every host Weft runs on
  if (header_len > kMaxHeaderBytes || header_len > bytes.size() - 8) {
    return header_error(path, "header length " + std::to_string(header_len) +
                                  " runs beyond the file's " + std::to_string(bytes.size()) +
                                  " bytes (truncated file?)");
  }
  const char* header = reinterpret_cast<const char*>(bytes.data()) + 8;
  const std::byte* data_begin = bytes.data() + 8 + header_len;
  const std::uint64_t data_size = bytes.size() - 8 - header_len;

  simdjson::dom::parser parser;
  simdjson::padded_string padded(header, header_len);
  simdjson::dom::object root;
  if (auto err = parser.parse(padded).get(root)) {
    return header_error(
        path, std::string("header is not a JSON object: ") + simdjson::error_message(err));
  }

  auto file = std::make_shared<SafetensorsFile>();
  file->path_ = path;
  struct Span {
    std::uint64_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  for (auto field : root) {
    std::string name(field.key);
    if (name == "__metadata__") {
      simdjson::dom::object meta;
      if (field.value.get(meta)) {
        return header_error(path, "\"__metadata__\" must be an object of strings");
      }
      for (auto entry : meta) {
        std::string_view value;
        if (entry.value.get(value)) {
          return header_error(
              path, "\"__metadata__\" field \"" + std::string(entry.key) + "\" must be a string");
        }
        file->metadata_[std::string(entry.key)] = std::string(value);
      }
      continue;
    }
    const std::string where = "tensor \"" + name + "\": ";
    simdjson::dom::object info;
    if (field.value.get(info)) return header_error(path, where + "entry must be an object");
    std::string_view dtype_text;
    if (info["dtype"].get(dtype_text)) {
      return header_error(path, where + "\"dtype\" missing or not a string");
    }
    auto dtype = parse_dtype(dtype_text);
    if (!dtype) {
      return header_error(path, where + "unknown dtype \"" + std::string(dtype_text) +
                                    "\" (expected F32, F16, BF16, I8, U8, I32, I64, F64 or BOOL)");
    }
    simdjson::dom::array shape_json;
    if (info["shape"].get(shape_json)) {
      return header_error(path, where + "\"shape\" missing or not an array");
    }
    std::vector<std::int64_t> shape;
    std::uint64_t numel = 1;
    for (auto dim_json : shape_json) {
      std::int64_t dim = 0;
      if (dim_json.get(dim) || dim < 0) {
        return header_error(path, where + "shape entries must be non-negative integers");
      }
      // Guard the product: a huge shape must not wrap around and pass the size check.
      if (dim != 0 && numel > std::numeric_limits<std::uint64_t>::max() / 16 /
                                  static_cast<std::uint64_t>(dim)) {
        return header_error(path, where + "shape " + shape_string(shape) + " is too large");
      }
      numel *= static_cast<std::uint64_t>(dim);
      shape.push_back(dim);
    }
    simdjson::dom::array offsets;
    std::uint64_t begin = 0, end = 0;
    if (info["data_offsets"].get(offsets) || offsets.size() != 2 || offsets.at(0).get(begin) ||
        offsets.at(1).get(end)) {
      return header_error(path, where + "\"data_offsets\" must be [begin, end] integers");
    }
    if (begin > end || end > data_size) {
      return header_error(path, where + "data_offsets [" + std::to_string(begin) + ", " +
                                    std::to_string(end) + "] fall outside the data region of " +
                                    std::to_string(data_size) + " bytes");
    }
    const std::uint64_t expected = numel * dtype_size(*dtype);
    if (end - begin != expected) {
      return header_error(path, where + "data_offsets span " + std::to_string(end - begin) +
                                    " bytes, but " + std::string(dtype_text) + " " +
                                    shape_string(shape) + " needs " + std::to_string(expected));
    }
    TensorView view;
    view.dtype = *dtype;
    view.shape = std::move(shape);
    view.data = data_begin + begin;
    view.owner = mapping;
    if (!file->tensors_.emplace(name, std::move(view)).second) {
      return header_error(path, where + "named twice in the header");
    }
    spans.push_back({begin, end, name});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.begin < b.begin; });
  for (std::size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].begin < spans[i - 1].end) {
      return header_error(path, "tensors \"" + spans[i - 1].name + "\" and \"" + spans[i].name +
                                    "\" overlap in the data region");
    }
  }
  for (auto& span : spans)
    file->names_.push_back(std::move(span.name));
  file->mapping_ = std::move(mapping);
  return std::shared_ptr<const SafetensorsFile>(std::move(file));
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

Result<void> WeightFiles::add(const std::filesystem::path& path,
                              const std::map<std::string, TensorView>& tensors) {
  const std::size_t index = sources_.size();
  for (const auto& [name, view] : tensors) {
    auto [it, inserted] = file_of_.emplace(name, index);
    if (!inserted) {
      return Error(ErrorCode::kParse, path.string() + ": tensor \"" + name + "\" is also in " +
                                          sources_[it->second].path.string());
    }
  }
  sources_.push_back({path, &tensors});
  return {};
}

namespace {

bool is_torch_checkpoint(const std::filesystem::path& path) {
  const auto ext = path.extension();
  return ext == ".bin" || ext == ".pt" || ext == ".pth";
}

}  // namespace

Result<WeightFiles> WeightFiles::open_files(const std::vector<std::filesystem::path>& files) {
  WeightFiles set;
  for (const auto& path : files) {
    if (is_torch_checkpoint(path)) {
      auto file = TorchCheckpoint::open(path);
      if (!file) return file.error();
      set.torch_files_.push_back(std::move(file.value()));
      if (auto added = set.add(path, set.torch_files_.back()->tensors()); !added) {
        return added.error();
      }
      continue;
    }
    auto file = SafetensorsFile::open(path);
    if (!file) return file.error();
    set.files_.push_back(std::move(file.value()));
    if (auto added = set.add(path, set.files_.back()->tensors()); !added) return added.error();
  }
  return set;
}

Result<WeightFiles> WeightFiles::open_folder(const std::filesystem::path& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir / "model.safetensors.index.json", ec)) {
    return open_index(dir, dir / "model.safetensors.index.json");
  }
  if (std::filesystem::exists(dir / "model.safetensors", ec)) {
    return open_files({dir / "model.safetensors"});
  }
  if (std::filesystem::exists(dir / "pytorch_model.bin.index.json", ec)) {
    return open_index(dir, dir / "pytorch_model.bin.index.json");
  }
  if (std::filesystem::exists(dir / "pytorch_model.bin", ec)) {
    return open_files({dir / "pytorch_model.bin"});
  }
  return Error(ErrorCode::kNotFound, dir.string() +
                                         ": no model.safetensors, model.safetensors.index.json, "
                                         "pytorch_model.bin or pytorch_model.bin.index.json in "
                                         "this folder");
}

Result<WeightFiles> WeightFiles::open_index(const std::filesystem::path& dir,
                                            const std::filesystem::path& index_path) {
  auto index_file = MappedFile::open(index_path);
  if (!index_file) return index_file.error();
  simdjson::dom::parser parser;
  simdjson::padded_string padded(index_file->text());
  simdjson::dom::object weight_map;
  simdjson::dom::element root;
  if (auto err = parser.parse(padded).get(root)) {
    return Error(ErrorCode::kParse,
                 index_path.string() + ": not valid JSON (" + simdjson::error_message(err) + ")");
  }
  if (root["weight_map"].get(weight_map)) {
    return Error(ErrorCode::kParse,
                 index_path.string() + ": field \"weight_map\" missing or not an object");
  }
  std::vector<std::filesystem::path> shards;
  std::set<std::string> seen;
  std::map<std::string, std::string> expected;  // tensor -> shard file name
  for (auto entry : weight_map) {
    std::string_view shard;
    if (entry.value.get(shard)) {
      return Error(ErrorCode::kParse, index_path.string() + ": weight_map entry \"" +
                                          std::string(entry.key) + "\" must be a file name");
    }
    // A shard name must stay inside the folder: no absolute paths, no "..".
    const std::filesystem::path shard_path(shard);
    if (shard_path.is_absolute() || shard.find("..") != std::string_view::npos) {
      return Error(ErrorCode::kParse, index_path.string() + ": weight_map entry \"" +
                                          std::string(entry.key) + "\" names \"" +
                                          std::string(shard) + "\" outside the model folder");
    }
    expected[std::string(entry.key)] = std::string(shard);
    if (seen.insert(std::string(shard)).second) shards.push_back(dir / shard_path);
  }
  auto set = open_files(shards);
  if (!set) return set.error();
  for (const auto& [tensor, shard] : expected) {
    if (set->origin(tensor) != (dir / shard).string()) {
      return Error(ErrorCode::kNotFound, index_path.string() + ": tensor \"" + tensor +
                                             "\" is listed in shard " + shard +
                                             ", which does not contain it");
    }
  }
  return set;
}

const TensorView* WeightFiles::find(const std::string& name) const {
  auto it = file_of_.find(name);
  if (it == file_of_.end()) return nullptr;
  auto found = sources_[it->second].tensors->find(name);
  return found == sources_[it->second].tensors->end() ? nullptr : &found->second;
}

std::string WeightFiles::origin(const std::string& name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? std::string() : sources_[it->second].path.string();
}

std::vector<std::string> WeightFiles::names() const {
  std::vector<std::string> out;
  for (const auto& [name, index] : file_of_)
    out.push_back(name);
  return out;
}

}  // namespace weft
