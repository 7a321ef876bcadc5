#pragma once
// PyTorch checkpoints (pytorch_model.bin and its shards): the ZIP container torch.save has
// written since torch 1.6, holding <prefix>/data.pkl (a pickled state dict) and one stored
// entry <prefix>/data/<key> per storage. The pickle is read by the restricted unpickler
// (pickle_reader.hpp), which executes nothing; each tensor becomes a zero-copy view into the
// mapped storage entry. Only contiguous (row-major) tensors are accepted; the legacy pre-1.6
// format (a bare pickle stream) is refused with a message saying how to convert it.

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft {

class TorchCheckpoint {
 public:
  // Maps and reads `path`. Errors name the file, the archive entry and, where one is at
  // fault, the tensor or the pickle offset.
  static Result<std::shared_ptr<const TorchCheckpoint>> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const noexcept { return path_; }
  // Tensor names in the state dict's order.
  const std::vector<std::string>& names() const noexcept { return names_; }
  const std::map<std::string, TensorView>& tensors() const noexcept { return tensors_; }
  // nullptr when absent.
  const TensorView* find(const std::string& name) const;

 private:
  std::filesystem::path path_;
  std::vector<std::string> names_;
  std::map<std::string, TensorView> tensors_;
};

}  // namespace weft
