#include "loaders/pickle_torch_globals.hpp"

#include <array>

namespace weft::pickle_globals {
namespace {

// Shapes of higher rank are not in any checkpoint Weft reads.
constexpr std::size_t kMaxRank = 16;

struct StorageType {
  std::string_view name;
  DType dtype;
};
constexpr std::array<StorageType, 9> kStorageTypes{{
    {"torch.FloatStorage", DType::kF32},
    {"torch.HalfStorage", DType::kF16},
    {"torch.BFloat16Storage", DType::kBF16},
    {"torch.DoubleStorage", DType::kF64},
    {"torch.LongStorage", DType::kI64},
    {"torch.IntStorage", DType::kI32},
    {"torch.CharStorage", DType::kI8},
    {"torch.ByteStorage", DType::kU8},
    {"torch.BoolStorage", DType::kBool},
}};

// Callables interpreted by REDUCE/NEWOBJ; plain names (storage types, dtypes) only as values.
constexpr std::array<std::string_view, 5> kCallables{
    "collections.OrderedDict", "torch._utils._rebuild_tensor_v2", "torch._utils._rebuild_tensor",
    "torch._utils._rebuild_parameter", "torch.Size"};
constexpr std::array<std::string_view, 9> kDtypes{
    "torch.float32", "torch.float16", "torch.bfloat16", "torch.float64", "torch.int64",
    "torch.int32",   "torch.int8",    "torch.uint8",    "torch.bool"};

}  // namespace

bool is_allowed(std::string_view name) {
  for (auto c : kCallables)
    if (c == name) return true;
  for (const auto& s : kStorageTypes)
    if (s.name == name) return true;
  for (auto d : kDtypes)
    if (d == name) return true;
  return false;
}

const char* kind_name(PickleValue::Kind kind) {
  using K = PickleValue::Kind;
  switch (kind) {
    case K::kNone:
      return "None";
    case K::kBool:
      return "bool";
    case K::kInt:
      return "int";
    case K::kFloat:
      return "float";
    case K::kString:
      return "str";
    case K::kBytes:
      return "bytes";
    case K::kTuple:
      return "tuple";
    case K::kList:
      return "list";
    case K::kDict:
      return "dict";
    case K::kGlobal:
      return "global";
    case K::kStorage:
      return "storage";
    case K::kTensor:
      return "tensor";
  }
  return "?";
}

namespace {

Error bad(const std::string& what) {
  return Error(ErrorCode::kParse, what);
}

PickleRef make(PickleValue::Kind kind) {
  auto v = std::make_shared<PickleValue>();
  v->kind = kind;
  return v;
}

Result<std::vector<std::int64_t>> int_tuple(const PickleValue& v, const char* what) {
  if (v.kind != PickleValue::Kind::kTuple || v.items.size() > kMaxRank) {
    return bad(std::string(what) + " must be a tuple of at most " + std::to_string(kMaxRank) +
               " ints, found a " + kind_name(v.kind));
  }
  std::vector<std::int64_t> out;
  for (const auto& item : v.items) {
    if (item->kind != PickleValue::Kind::kInt || item->integer < 0) {
      return bad(std::string(what) + " must hold non-negative ints");
    }
    out.push_back(item->integer);
  }
  return out;
}

// _rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata]) or
// _rebuild_tensor(storage, offset, size, stride).
Result<PickleRef> rebuild_tensor(const PickleValue& args, const char* who, bool v2) {
  using K = PickleValue::Kind;
  const auto& a = args.items;
  const bool count_ok = v2 ? (a.size() == 6 || a.size() == 7) : a.size() == 4;
  if (!count_ok) {
    return bad(std::string(who) + " takes " + (v2 ? "6 or 7" : "4") + " arguments, got " +
               std::to_string(a.size()));
  }
  if (a[0]->kind != K::kStorage) {
    return bad(std::string(who) + ": first argument must be a storage (persistent id), found a " +
               kind_name(a[0]->kind));
  }
  if (a[1]->kind != K::kInt || a[1]->integer < 0) {
    return bad(std::string(who) + ": storage offset must be a non-negative int");
  }
  auto shape = int_tuple(*a[2], "tensor size");
  if (!shape) return shape.error();
  auto stride = int_tuple(*a[3], "tensor stride");
  if (!stride) return stride.error();
  if (shape->size() != stride->size()) {
    return bad(std::string(who) + ": size " + shape_string(*shape) + " and stride " +
               shape_string(*stride) + " differ in rank");
  }
  auto v = make(K::kTensor);
  v->tensor = a[0]->tensor;
  v->tensor.storage_offset = a[1]->integer;
  v->tensor.shape = std::move(shape.value());
  v->tensor.stride = std::move(stride.value());
  return v;
}

}  // namespace

Result<PickleRef> storage_from_persistent_id(const PickleValue& pid) {
  using K = PickleValue::Kind;
  const auto& it = pid.items;
  if (pid.kind != K::kTuple || it.size() != 5 || it[0]->kind != K::kString ||
      it[0]->text != "storage" || it[1]->kind != K::kGlobal || it[2]->kind != K::kString ||
      it[3]->kind != K::kString || it[4]->kind != K::kInt || it[4]->integer < 0) {
    return bad("persistent id must be ('storage', torch.<T>Storage, key, location, numel)");
  }
  const StorageType* type = nullptr;
  for (const auto& s : kStorageTypes)
    if (s.name == it[1]->text) type = &s;
  if (type == nullptr) return bad("persistent id names '" + it[1]->text + "', not a storage type");
  auto v = make(K::kStorage);
  v->tensor.dtype = type->dtype;
  v->tensor.storage_key = it[2]->text;
  v->tensor.storage_numel = it[4]->integer;
  return v;
}

Result<PickleRef> call(const PickleValue& callable, const PickleValue& args) {
  using K = PickleValue::Kind;
  if (callable.kind != K::kGlobal) {
    return bad(std::string("call of a ") + kind_name(callable.kind) + ", expected a global");
  }
  if (args.kind != K::kTuple) {
    return bad("arguments of '" + callable.text + "' must be a tuple, found a " +
               kind_name(args.kind));
  }
  const std::string& f = callable.text;
  const auto& a = args.items;
  if (f == "collections.OrderedDict") {
    if (!a.empty()) {
      return bad("collections.OrderedDict is only rebuilt empty (then filled by SETITEMS)");
    }
    return make(K::kDict);
  }
  if (f == "torch._utils._rebuild_tensor_v2") {
    return rebuild_tensor(args, "_rebuild_tensor_v2", true);
  }
  if (f == "torch._utils._rebuild_tensor") return rebuild_tensor(args, "_rebuild_tensor", false);
  if (f == "torch._utils._rebuild_parameter") {
    if (a.size() != 3 || a[0]->kind != K::kTensor) {
      return bad("_rebuild_parameter takes (tensor, requires_grad, backward_hooks)");
    }
    return a[0];
  }
  if (f == "torch.Size") {
    if (a.size() != 1) return bad("torch.Size takes one tuple of ints");
    auto dims = int_tuple(*a[0], "torch.Size argument");
    if (!dims) return dims.error();
    return a[0];
  }
  return bad("global '" + f + "' is allowed as a value but cannot be called");
}

}  // namespace weft::pickle_globals

namespace weft {

std::string allowed_pickle_globals() {
  std::string out;
  auto add = [&](std::string_view name) {
    if (!out.empty()) out += ", ";
    out += name;
  };
  for (auto c : pickle_globals::kCallables)
    add(c);
  for (const auto& s : pickle_globals::kStorageTypes)
    add(s.name);
  for (auto d : pickle_globals::kDtypes)
    add(d);
  return out;
}
}  // namespace weft
