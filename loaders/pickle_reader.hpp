#pragma once
// A restricted unpickler for PyTorch checkpoints (pickle protocols 2 to 5). It runs no code:
// the only globals it accepts are those torch.save writes for a state dict (see
// allowed_pickle_globals()), and their "calls" are interpreted here, not executed. Any other
// global, unknown opcode, oversized length, truncated stream, over-deep nesting or bad memo
// index is an error naming the stream (file and archive entry) and the byte offset.
//
// The result is a small value tree: dicts, lists, tuples, scalars, strings and tensor records
// (dtype, storage key and numel, offset, shape, strides) that the checkpoint loader resolves
// against the archive's storage entries.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft {

struct PickleValue;
using PickleRef = std::shared_ptr<PickleValue>;

// A tensor as _rebuild_tensor_v2 describes it: a view of `shape` and `stride` (in elements)
// starting `storage_offset` elements into the storage saved under `storage_key`.
struct PickledTensor {
  DType dtype = DType::kF32;
  std::string storage_key;         // the archive entry <prefix>/data/<storage_key>
  std::int64_t storage_numel = 0;  // elements in the storage
  std::int64_t storage_offset = 0;
  std::vector<std::int64_t> shape;
  std::vector<std::int64_t> stride;
};

struct PickleValue {
  enum class Kind : std::uint8_t {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,   // text; `text`
    kBytes,    // `text` holds the bytes
    kTuple,    // `items`
    kList,     // `items`
    kDict,     // `items` holds key, value, key, value, ... in insertion order
    kGlobal,   // an allowed global not yet called; `text` is "module.name"
    kStorage,  // a persistent id resolved to a storage; `tensor` has dtype, key and numel
    kTensor,   // `tensor`
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  std::int64_t integer = 0;
  double real = 0;
  std::string text;
  std::vector<PickleRef> items;
  PickledTensor tensor;
  int depth = 0;        // containers nested below this value (bounded, see pickle_reader.cpp)
  bool sealed = false;  // placed inside another value: it may no longer change
};

// "collections.OrderedDict, torch._utils._rebuild_tensor_v2, ..." for messages and docs.
std::string allowed_pickle_globals();

// Unpickles `bytes`. `origin` names the stream in errors, e.g. "model.bin:archive/data.pkl".
Result<PickleRef> read_pickle(std::span<const std::byte> bytes, const std::string& origin);

}  // namespace weft
