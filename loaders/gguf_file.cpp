#include "loaders/gguf_file.hpp"

#include <cstring>
#include <limits>

#include "loaders/mapped_file.hpp"

namespace weft::gguf {
namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 8;             // nested arrays deeper than this are refused

// A cursor over the file's bytes; every read checks what remains and fails with the offset.
class Reader {
 public:
  Reader(std::span<const std::byte> bytes, const std::string& source)
      : bytes_(bytes), source_(source) {}

  std::uint64_t offset() const { return pos_; }
  std::uint64_t remaining() const { return bytes_.size() - pos_; }

  Error error(const std::string& what) const { return error_at(pos_, what); }
  Error error_at(std::uint64_t offset, const std::string& what) const {
    return Error(ErrorCode::kParse, source_ + ": at byte " + std::to_string(offset) + ": " + what);
  }

  template <class T>
  Result<T> read(const char* what) {
    if (remaining() < sizeof(T)) return truncated(what, sizeof(T));
    T value;
    std::memcpy(&value, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return value;
  }

  Result<std::string> read_string(const std::string& what) {
    const std::uint64_t start = pos_;
    auto length = read<std::uint64_t>((what + " length").c_str());
    if (!length) return length.error();
    if (*length > remaining()) {
      return error_at(start, what + " claims " + std::to_string(*length) + " bytes but only " +
                                 std::to_string(remaining()) +
                                 " remain in the file (truncated or corrupt file)");
    }
    std::string out(reinterpret_cast<const char*>(bytes_.data() + pos_), *length);
    pos_ += *length;
    return out;
  }

  Error truncated(const std::string& what, std::uint64_t need) const {
    return error("file ends while reading " + what + " (" + std::to_string(need) +
                 " bytes needed, " + std::to_string(remaining()) + " remain): truncated file?");
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& source_;
  std::uint64_t pos_ = 0;
};

std::uint64_t scalar_size(ValueType type) {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool:
      return 1;
    case ValueType::kU16:
    case ValueType::kI16:
      return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32:
      return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64:
      return 8;
    case ValueType::kString:
      return 8;  // at least its length
    case ValueType::kArray:
      return 12;  // at least element type and count
  }
  return 1;
}

bool valid_value_type(std::uint32_t t) {
  return t <= static_cast<std::uint32_t>(ValueType::kF64);
}

// Reads one scalar of `type` into `value` (integer and number).
Result<void> read_scalar(Reader& r, ValueType type, Value& value, const std::string& what) {
  auto set_int = [&](auto v) -> Result<void> {
    if (!v) return v.error();
    value.integer = static_cast<std::int64_t>(*v);
    value.number = static_cast<double>(*v);
    return {};
  };
  const char* w = what.c_str();
  switch (type) {
    case ValueType::kU8:
      return set_int(r.read<std::uint8_t>(w));
    case ValueType::kI8:
      return set_int(r.read<std::int8_t>(w));
    case ValueType::kU16:
      return set_int(r.read<std::uint16_t>(w));
    case ValueType::kI16:
      return set_int(r.read<std::int16_t>(w));
    case ValueType::kU32:
      return set_int(r.read<std::uint32_t>(w));
    case ValueType::kI32:
      return set_int(r.read<std::int32_t>(w));
    case ValueType::kU64:
      return set_int(r.read<std::uint64_t>(w));
    case ValueType::kI64:
      return set_int(r.read<std::int64_t>(w));
    case ValueType::kBool: {
      const std::uint64_t at = r.offset();
      auto b = r.read<std::uint8_t>(w);
      if (!b) return b.error();
      if (*b > 1) {
        return r.error_at(at, what + ": bool must be 0 or 1, found " + std::to_string(*b));
      }
      value.integer = *b;
      value.number = *b;
      return {};
    }
    case ValueType::kF32: {
      auto f = r.read<float>(w);
      if (!f) return f.error();
      value.number = *f;
      return {};
    }
    case ValueType::kF64: {
      auto f = r.read<double>(w);
      if (!f) return f.error();
      value.number = *f;
      return {};
    }
    default:
      return r.error(what + ": not a scalar type");
  }
}

Result<Value> read_value(Reader& r, ValueType type, const std::string& what, int depth) {
  Value value;
  value.type = type;
  if (type == ValueType::kString) {
    auto s = r.read_string(what);
    if (!s) return s.error();
    value.string = std::move(s.value());
    return value;
  }
  if (type != ValueType::kArray) {
    if (auto ok = read_scalar(r, type, value, what); !ok) return ok.error();
    return value;
  }
  if (depth >= kMaxArrayDepth) {
    return r.error(what + ": arrays nest deeper than " + std::to_string(kMaxArrayDepth) +
                   " levels");
  }
  const std::uint64_t type_at = r.offset();
  auto element = r.read<std::uint32_t>((what + " element type").c_str());
  if (!element) return element.error();
  if (!valid_value_type(*element)) {
    return r.error_at(type_at, what + ": unknown array element type " + std::to_string(*element) +
                                   " (expected 0-12)");
  }
  value.element_type = static_cast<ValueType>(*element);
  const std::uint64_t count_at = r.offset();
  auto count = r.read<std::uint64_t>((what + " element count").c_str());
  if (!count) return count.error();
  // Each element takes at least scalar_size bytes: a count the rest of the file cannot hold is
  // refused before anything is allocated for it.
  if (*count > r.remaining() / scalar_size(value.element_type)) {
    return r.error_at(count_at, what + ": array of " + std::to_string(*count) + " " +
                                    std::string(value_type_name(value.element_type)) +
                                    " elements does not fit in the " +
                                    std::to_string(r.remaining()) +
                                    " bytes that remain (truncated or corrupt file)");
  }
  value.size = *count;
  if (value.element_type == ValueType::kString) {
    value.strings.reserve(*count);
    for (std::uint64_t i = 0; i < *count; ++i) {
      auto s = r.read_string(what + "[" + std::to_string(i) + "]");
      if (!s) return s.error();
      value.strings.push_back(std::move(s.value()));
    }
  } else if (value.element_type == ValueType::kArray) {
    for (std::uint64_t i = 0; i < *count; ++i) {
      auto inner =
          read_value(r, ValueType::kArray, what + "[" + std::to_string(i) + "]", depth + 1);
      if (!inner) return inner.error();
    }
  } else {
    value.numbers.reserve(*count);
    Value item;
    for (std::uint64_t i = 0; i < *count; ++i) {
      if (auto ok = read_scalar(r, value.element_type, item, what); !ok) return ok.error();
      value.numbers.push_back(item.number);
    }
  }
  return value;
}

}  // namespace

bool Value::is_integer() const {
  switch (type) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kU16:
    case ValueType::kI16:
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kU64:
    case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

std::uint64_t TensorInfo::numel() const {
  std::uint64_t n = 1;
  for (auto d : dims)
    n *= d;
  return n;
}

std::vector<std::int64_t> TensorInfo::shape() const {
  return {dims.rbegin(), dims.rend()};
}

std::string_view value_type_name(ValueType type) noexcept {
  static constexpr const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                           "int32",  "float32", "bool",   "string", "array",
                                           "uint64", "int64",   "float64"};
  const auto i = static_cast<std::uint32_t>(type);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

Result<std::shared_ptr<const File>> File::open(const std::filesystem::path& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped) return mapped.error();
  auto mapping = std::make_shared<MappedFile>(std::move(mapped.value()));
  auto file = parse(mapping->bytes(), path.string());
  if (!file) return file.error();
  auto owned = std::const_pointer_cast<File>(file.value());
  owned->owner_ = mapping;
  return file;
}

Result<std::shared_ptr<const File>> File::parse(std::span<const std::byte> bytes,
                                                const std::string& source) {
  auto file = std::make_shared<File>();
  file->source_ = source;
  file->bytes_ = bytes;
  Reader r(bytes, file->source_);

  auto magic = r.read<std::uint32_t>("the magic number");
  if (!magic) return magic.error();
  if (*magic != kMagic) {
    char shown[5] = {};
    std::memcpy(shown, bytes.data(), 4);
    for (char& c : std::span(shown, 4))
      if (c < 32 || c > 126) c = '?';
    return r.error_at(
        0, std::string("bad magic \"") + shown + "\": expected \"GGUF\" (not a GGUF file)");
  }
  auto version = r.read<std::uint32_t>("the version");
  if (!version) return version.error();
  if (*version != 2 && *version != 3) {
    std::string hint;
    if (*version == 0x03000000 || *version == 0x02000000) {
      hint = " (a big-endian GGUF file; only little-endian files are read)";
    } else if (*version == 1) {
      hint = " (GGUF v1 used 32-bit counts; convert the file again with a current llama.cpp)";
    }
    return r.error_at(
        4, "unsupported GGUF version " + std::to_string(*version) + ", expected 3 (or 2)" + hint);
  }
  file->version_ = *version;
  auto tensor_count = r.read<std::uint64_t>("the tensor count");
  if (!tensor_count) return tensor_count.error();
  auto kv_count = r.read<std::uint64_t>("the metadata count");
  if (!kv_count) return kv_count.error();
  // A key-value pair takes at least 12 bytes (key length, value type) and a tensor
  // descriptor at least 24: counts beyond what the file can hold are corrupt.
  if (*kv_count > r.remaining() / 12) {
    return r.error_at(16, "metadata count " + std::to_string(*kv_count) +
                              " cannot fit in a file of " + std::to_string(bytes.size()) +
                              " bytes (truncated or corrupt file)");
  }
  for (std::uint64_t i = 0; i < *kv_count; ++i) {
    const std::uint64_t at = r.offset();
    auto key = r.read_string("metadata key #" + std::to_string(i));
    if (!key) return key.error();
    const std::string what = "metadata \"" + *key + "\"";
    const std::uint64_t type_at = r.offset();
    auto type = r.read<std::uint32_t>((what + " value type").c_str());
    if (!type) return type.error();
    if (!valid_value_type(*type)) {
      return r.error_at(
          type_at, what + ": unknown value type " + std::to_string(*type) + " (expected 0-12)");
    }
    auto value = read_value(r, static_cast<ValueType>(*type), what, 0);
    if (!value) return value.error();
    if (!file->metadata_.emplace(*key, std::move(value.value())).second) {
      return r.error_at(at, what + " appears twice");
    }
  }
  if (const Value* a = file->find("general.alignment")) {
    if (a->type != ValueType::kU32 || a->integer == 0 || (a->integer & (a->integer - 1)) != 0) {
      return r.error("metadata \"general.alignment\" must be a uint32 power of two, found " +
                     std::string(value_type_name(a->type)) + " " + std::to_string(a->integer));
    }
    file->alignment_ = static_cast<std::uint64_t>(a->integer);
  }

  if (*tensor_count > r.remaining() / 24) {
    return r.error_at(8, "tensor count " + std::to_string(*tensor_count) + " cannot fit in the " +
                             std::to_string(r.remaining()) +
                             " bytes that remain (truncated or corrupt file)");
  }
  file->tensors_.reserve(*tensor_count);
  for (std::uint64_t i = 0; i < *tensor_count; ++i) {
    TensorInfo t;
    t.info_offset = r.offset();
    auto name = r.read_string("the name of tensor #" + std::to_string(i));
    if (!name) return name.error();
    t.name = std::move(name.value());
    const std::string what = "tensor \"" + t.name + "\"";
    const std::uint64_t dims_at = r.offset();
    auto n_dims = r.read<std::uint32_t>((what + " dimension count").c_str());
    if (!n_dims) return n_dims.error();
    if (*n_dims == 0 || *n_dims > kMaxDims) {
      return r.error_at(dims_at,
                        what + ": " + std::to_string(*n_dims) + " dimensions, expected 1 to 4");
    }
    std::uint64_t numel = 1;
    for (std::uint32_t d = 0; d < *n_dims; ++d) {
      const std::uint64_t dim_at = r.offset();
      auto dim = r.read<std::uint64_t>((what + " dimension").c_str());
      if (!dim) return dim.error();
      // Bound the product so that it (times the largest 4 bytes per value) cannot wrap.
      if (*dim == 0 || *dim > (std::uint64_t{1} << 40) || numel > (std::uint64_t{1} << 50) / *dim) {
        return r.error_at(dim_at, what + ": dimension " + std::to_string(d) + " is " +
                                      std::to_string(*dim) +
                                      " (zero, or the tensor would be impossibly large)");
      }
      numel *= *dim;
      t.dims.push_back(*dim);
    }
    const std::uint64_t type_at = r.offset();
    auto type = r.read<std::uint32_t>((what + " type").c_str());
    if (!type) return type.error();
    auto known = tensor_type_from_id(*type);
    if (!known) {
      return Error(ErrorCode::kUnsupported, file->source_ + ": at byte " + std::to_string(type_at) +
                                                ": " + what + " has tensor type " +
                                                ggml_type_name(*type) +
                                                ", which Weft does not read (supported: " +
                                                std::string(supported_tensor_types()) + ")");
    }
    t.type = *known;
    const BlockGeometry g = block_geometry(t.type);
    if (t.dims[0] % g.block_elements != 0) {
      return r.error_at(dims_at, what + ": rows of " + std::to_string(t.dims[0]) +
                                     " values are not whole " +
                                     std::string(tensor_type_name(t.type)) + " blocks of " +
                                     std::to_string(g.block_elements));
    }
    t.data_bytes = numel / g.block_elements * g.block_bytes;
    const std::uint64_t offset_at = r.offset();
    auto offset = r.read<std::uint64_t>((what + " data offset").c_str());
    if (!offset) return offset.error();
    if (*offset % file->alignment_ != 0) {
      return r.error_at(offset_at, what + ": data offset " + std::to_string(*offset) +
                                       " is not a multiple of the alignment " +
                                       std::to_string(file->alignment_));
    }
    t.data_offset = *offset;  // relative until the data section's start is known
    if (!file->tensor_index_.emplace(t.name, file->tensors_.size()).second) {
      return r.error_at(t.info_offset, what + " is described twice");
    }
    file->tensors_.push_back(std::move(t));
  }
  const std::uint64_t align = file->alignment_;
  const std::uint64_t data_start = (r.offset() + align - 1) / align * align;
  const std::uint64_t size = bytes.size();
  for (TensorInfo& t : file->tensors_) {
    if (data_start > size || t.data_offset > size - data_start ||
        t.data_bytes > size - data_start - t.data_offset) {
      return Error(ErrorCode::kParse, file->source_ + ": tensor \"" + t.name + "\" (" +
                                          std::string(tensor_type_name(t.type)) + ", " +
                                          std::to_string(t.data_bytes) + " bytes) at byte " +
                                          std::to_string(data_start + t.data_offset) +
                                          " runs past the end of the " + std::to_string(size) +
                                          "-byte file (truncated file?)");
    }
    t.data_offset += data_start;
  }
  return std::shared_ptr<const File>(std::move(file));
}

const Value* File::find(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const TensorInfo* File::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::span<const std::byte> File::data(const TensorInfo& tensor) const {
  return bytes_.subspan(tensor.data_offset, tensor.data_bytes);
}

namespace {

Error wrong_type(const std::string& source, const std::string& key, const Value& v,
                 const char* expected) {
  return Error(ErrorCode::kParse, source + ": metadata \"" + key + "\" is " +
                                      std::string(value_type_name(v.type)) + ", expected " +
                                      expected);
}

}  // namespace

Result<std::optional<std::string>> File::get_string(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (v->type != ValueType::kString) return wrong_type(source_, key, *v, "a string");
  return std::optional<std::string>(v->string);
}

Result<std::optional<std::int64_t>> File::get_integer(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<std::int64_t>();
  if (!v->is_integer()) return wrong_type(source_, key, *v, "an integer");
  return std::optional<std::int64_t>(v->integer);
}

Result<std::optional<double>> File::get_number(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return wrong_type(source_, key, *v, "a number");
  return std::optional<double>(v->number);
}

Result<std::optional<bool>> File::get_bool(const std::string& key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (v->type != ValueType::kBool) return wrong_type(source_, key, *v, "a bool");
  return std::optional<bool>(v->integer != 0);
}

}  // namespace weft::gguf
