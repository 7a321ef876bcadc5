#pragma once
// GGUF files (ggml's single-file model format, version 2 and 3): a header, typed metadata,
// tensor descriptors and aligned tensor data. The file is mapped once and checked whole
// before anything is handed out: every length and count against the bytes that remain, every
// tensor's type supported, its rows whole blocks and its data inside the file. An error names
// the file, the byte offset and, where one is at fault, the metadata key or the tensor.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "loaders/gguf_types.hpp"
#include "weft/error.hpp"

namespace weft::gguf {

// Metadata value types, numbered as in the specification.
enum class ValueType : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

// One metadata value. Scalars keep both an integer and a floating reading; arrays keep their
// element type and either strings or numbers (arrays of arrays are skipped: `size` only).
struct Value {
  ValueType type = ValueType::kU8;
  ValueType element_type = ValueType::kU8;  // arrays only
  std::int64_t integer = 0;                 // integers and bools (u64 above 2^63 wraps)
  double number = 0;                        // every numeric type
  std::string string;
  std::vector<std::string> strings;  // array of strings
  std::vector<double> numbers;       // array of numbers or bools
  std::uint64_t size = 0;            // array length

  bool is_integer() const;
  bool is_number() const {
    return is_integer() || type == ValueType::kF32 || type == ValueType::kF64;
  }
};

struct TensorInfo {
  std::string name;
  std::vector<std::uint64_t> dims;  // GGUF order: dims[0] varies fastest (a row's length)
  TensorType type = TensorType::kF32;
  std::uint64_t info_offset = 0;  // where the descriptor starts in the file
  std::uint64_t data_offset = 0;  // absolute byte offset of the data in the file
  std::uint64_t data_bytes = 0;

  std::uint64_t numel() const;
  // Row-major shape, outermost first (dims reversed): what safetensors would store.
  std::vector<std::int64_t> shape() const;
};

class File {
 public:
  // Maps and checks `path`.
  static Result<std::shared_ptr<const File>> open(const std::filesystem::path& path);
  // Checks bytes already in memory (the fuzz target); `source` names them in errors. The
  // bytes must outlive the File.
  static Result<std::shared_ptr<const File>> parse(std::span<const std::byte> bytes,
                                                   const std::string& source);

  const std::string& source() const noexcept { return source_; }
  std::uint32_t version() const noexcept { return version_; }
  std::uint64_t alignment() const noexcept { return alignment_; }
  const std::map<std::string, Value>& metadata() const noexcept { return metadata_; }
  const std::vector<TensorInfo>& tensors() const noexcept { return tensors_; }

  const Value* find(const std::string& key) const;
  const TensorInfo* find_tensor(const std::string& name) const;
  // The tensor's bytes (checked at open to lie inside the file).
  std::span<const std::byte> data(const TensorInfo& tensor) const;

  // Typed metadata lookups. Absent: nullopt. Present with another type: an error naming the
  // key, the type found and the type expected.
  Result<std::optional<std::string>> get_string(const std::string& key) const;
  Result<std::optional<std::int64_t>> get_integer(const std::string& key) const;
  Result<std::optional<double>> get_number(const std::string& key) const;
  Result<std::optional<bool>> get_bool(const std::string& key) const;

  // Whatever keeps the bytes alive (the mapping), for views into data().
  std::shared_ptr<const void> owner() const noexcept { return owner_; }

 private:
  std::string source_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::map<std::string, Value> metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::size_t> tensor_index_;
  std::span<const std::byte> bytes_;
  std::shared_ptr<const void> owner_;
};

std::string_view value_type_name(ValueType type) noexcept;

}  // namespace weft::gguf
