#include "loaders/torch_checkpoint.hpp"

#include <limits>
#include <unordered_map>

#include "loaders/mapped_file.hpp"
#include "loaders/pickle_reader.hpp"
#include "loaders/zip_archive.hpp"

namespace weft {
namespace {

Error checkpoint_error(const std::string& where, const std::string& what,
                       ErrorCode code = ErrorCode::kParse) {
  return Error(code, where + ": " + what);
}

// A file that is not a ZIP but starts like a pickle stream is torch's pre-1.6 format.
bool looks_like_legacy(const std::filesystem::path& path) {
  auto file = MappedFile::open(path);
  return file && file->size() >= 2 && file->bytes()[0] == std::byte{0x80};
}

// Row-major strides of `shape`; dimensions of size 1, and every dimension of an empty tensor,
// may carry any stride.
bool contiguous(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& stride) {
  for (auto dim : shape)
    if (dim == 0) return true;
  std::int64_t expected = 1;
  for (std::size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && stride[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

}  // namespace

Result<std::shared_ptr<const TorchCheckpoint>> TorchCheckpoint::open(
    const std::filesystem::path& path) {
  auto opened = ZipArchive::open(path);
  if (!opened) {
    if (opened.error().code() == ErrorCode::kParse && looks_like_legacy(path)) {
      return checkpoint_error(path.string(),
                              "the legacy (pre-torch-1.6, non-ZIP) checkpoint format is not "
                              "supported; re-save it with a current torch.save or convert it "
                              "to safetensors",
                              ErrorCode::kUnsupported);
    }
    return opened.error();
  }
  auto archive = std::make_shared<const ZipArchive>(std::move(opened.value()));
  // torch names the top folder after the file ("archive" or the file's stem); find it by
  // its data.pkl.
  const ZipEntry* pkl = nullptr;
  for (const auto& entry : archive->entries()) {
    const auto slash = entry.name.find('/');
    if (slash != std::string::npos && entry.name.substr(slash) == "/data.pkl") {
      if (pkl != nullptr) {
        return checkpoint_error(path.string(), "two pickles in one archive (\"" + pkl->name +
                                                   "\" and \"" + entry.name + "\")");
      }
      pkl = &entry;
    }
  }
  if (pkl == nullptr) {
    return checkpoint_error(path.string(),
                            "no <prefix>/data.pkl entry: not a torch.save checkpoint");
  }
  const std::string prefix = pkl->name.substr(0, pkl->name.size() - std::string("data.pkl").size());
  if (const ZipEntry* order = archive->find(prefix + "byteorder")) {
    auto bytes = archive->data(*order);
    if (!bytes) return bytes.error();
    const std::string_view text(reinterpret_cast<const char*>(bytes->data()), bytes->size());
    if (text != "little") {
      return checkpoint_error(path.string() + ":" + order->name,
                              "byte order \"" + std::string(text.substr(0, 16)) +
                                  "\" is not supported (only little-endian)",
                              ErrorCode::kUnsupported);
    }
  }
  const std::string pkl_where = path.string() + ":" + pkl->name;
  auto pkl_bytes = archive->data(*pkl);
  if (!pkl_bytes) return pkl_bytes.error();
  auto root = read_pickle(pkl_bytes.value(), pkl_where);
  if (!root) return root.error();
  if (root.value()->kind != PickleValue::Kind::kDict) {
    return checkpoint_error(pkl_where,
                            "the pickle holds no state dict (a dict of name -> tensor) at its top");
  }

  std::unordered_map<std::string, const ZipEntry*> by_name;
  for (const auto& entry : archive->entries())
    by_name.emplace(entry.name, &entry);

  auto checkpoint = std::make_shared<TorchCheckpoint>();
  checkpoint->path_ = path;
  const auto& items = root.value()->items;
  for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
    const auto& key = items[i];
    const auto& value = items[i + 1];
    if (key->kind != PickleValue::Kind::kString) {
      return checkpoint_error(pkl_where,
                              "state dict key " + std::to_string(i / 2) + " is not a string");
    }
    const std::string where = pkl_where + ": tensor \"" + key->text + "\"";
    if (value->kind != PickleValue::Kind::kTensor) {
      return checkpoint_error(where,
                              "value is not a tensor (only flat state dicts of tensors "
                              "are read)");
    }
    const PickledTensor& t = value->tensor;
    if (!contiguous(t.shape, t.stride)) {
      return checkpoint_error(where,
                              "stride " + shape_string(t.stride) + " of shape " +
                                  shape_string(t.shape) +
                                  " is not contiguous (row-major); save tensors "
                                  "with .contiguous()",
                              ErrorCode::kUnsupported);
    }
    const std::uint64_t element = dtype_size(t.dtype);
    std::uint64_t numel = 1;
    for (auto dim : t.shape) {
      if (dim != 0 && numel > std::numeric_limits<std::uint64_t>::max() / 16 /
                                  static_cast<std::uint64_t>(dim)) {
        return checkpoint_error(where, "shape " + shape_string(t.shape) + " is too large");
      }
      numel *= static_cast<std::uint64_t>(dim);
    }
    const auto storage_numel = static_cast<std::uint64_t>(t.storage_numel);
    const auto offset = static_cast<std::uint64_t>(t.storage_offset);
    if (offset > storage_numel || numel > storage_numel - offset) {
      return checkpoint_error(where, "elements [" + std::to_string(offset) + ", +" +
                                         std::to_string(numel) + ") lie outside its storage of " +
                                         std::to_string(storage_numel) + " elements");
    }
    const std::string storage_name = prefix + "data/" + t.storage_key;
    auto found = by_name.find(storage_name);
    if (found == by_name.end()) {
      return checkpoint_error(where, "storage entry \"" + storage_name + "\" is missing");
    }
    auto storage = archive->data(*found->second);
    if (!storage) return storage.error();
    if (storage_numel > storage->size() / element) {
      return checkpoint_error(where, "storage entry \"" + storage_name + "\" holds " +
                                         std::to_string(storage->size()) + " bytes, but " +
                                         std::to_string(storage_numel) + " " +
                                         std::string(dtype_name(t.dtype)) + " elements need " +
                                         std::to_string(storage_numel * element));
    }
    TensorView view;
    view.dtype = t.dtype;
    view.shape = t.shape;
    view.data = storage->data() + offset * element;
    view.owner = archive;
    if (!checkpoint->tensors_.emplace(key->text, std::move(view)).second) {
      return checkpoint_error(where, "named twice in the state dict");
    }
    checkpoint->names_.push_back(key->text);
  }
  return std::shared_ptr<const TorchCheckpoint>(std::move(checkpoint));
}

const TensorView* TorchCheckpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

}  // namespace weft
