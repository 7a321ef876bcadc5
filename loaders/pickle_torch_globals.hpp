#pragma once
// The vocabulary of the restricted unpickler: the globals torch.save writes for a state dict,
// and what their "calls" and persistent ids mean. Nothing here runs Python code; each allowed
// callable is interpreted into a PickleValue. Errors say only what is wrong; the unpickler
// adds the stream's name and the opcode's offset.

#include <string_view>

#include "loaders/pickle_reader.hpp"

namespace weft::pickle_globals {

// Whether GLOBAL/STACK_GLOBAL may name "module.name".
bool is_allowed(std::string_view name);

// "dict", "tensor", ... for messages.
const char* kind_name(PickleValue::Kind kind);

// ('storage', torch.<T>Storage, key, location, numel) -> a kStorage value.
Result<PickleRef> storage_from_persistent_id(const PickleValue& pid);

// callable(*args) for an allowed callable: OrderedDict() -> an empty dict,
// _rebuild_tensor_v2/_rebuild_tensor -> a tensor record, _rebuild_parameter -> its tensor,
// torch.Size(t) -> t. Any other callable, or bad arguments, is an error.
Result<PickleRef> call(const PickleValue& callable, const PickleValue& args);

}  // namespace weft::pickle_globals
