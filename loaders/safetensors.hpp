#pragma once
// safetensors checkpoints: one file, or shards listed by model.safetensors.index.json. The
// file is mapped once; every tensor is a zero-copy view into the map. The header is checked
// completely before any view is handed out (dtype known, shape and byte size agree, offsets
// inside the data region and not overlapping), so a bad file is an error, never a crash.

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "weft/error.hpp"
#include "weft/tensor.hpp"

namespace weft {

class TorchCheckpoint;

class SafetensorsFile {
 public:
  // Maps and validates `path`. Errors name the file and, where one is at fault, the tensor.
  static Result<std::shared_ptr<const SafetensorsFile>> open(const std::filesystem::path& path);

  const std::filesystem::path& path() const noexcept { return path_; }
  // Tensor names in file order of their data offsets.
  const std::vector<std::string>& names() const noexcept { return names_; }
  const std::map<std::string, TensorView>& tensors() const noexcept { return tensors_; }
  // The "__metadata__" string map of the header (empty when absent).
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  // nullptr when absent.
  const TensorView* find(const std::string& name) const;

 private:
  struct Mapping;
  std::filesystem::path path_;
  std::shared_ptr<const Mapping> mapping_;
  std::vector<std::string> names_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint folder, each remembering which file it came from (for errors).
// The files are safetensors or PyTorch checkpoints (torch_checkpoint.hpp); both give the same
// zero-copy views.
class WeightFiles {
 public:
  // Opens the first of these that `dir` holds: model.safetensors.index.json and its shards,
  // model.safetensors, pytorch_model.bin.index.json and its shards, pytorch_model.bin. A
  // tensor named twice, or an index naming a tensor its shard lacks, is an error.
  static Result<WeightFiles> open_folder(const std::filesystem::path& dir);
  // Opens the given files as one set: .bin, .pt and .pth files as PyTorch checkpoints, any
  // other as safetensors.
  static Result<WeightFiles> open_files(const std::vector<std::filesystem::path>& files);

  const TensorView* find(const std::string& name) const;
  // The file holding `name` ("" when absent).
  std::string origin(const std::string& name) const;
  std::vector<std::string> names() const;
  // The safetensors files of the set, and its PyTorch checkpoints.
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }
  const std::vector<std::shared_ptr<const TorchCheckpoint>>& torch_files() const {
    return torch_files_;
  }

 private:
  // One opened file of either kind; `tensors` points into a file kept by files_/torch_files_.
  struct Source {
    std::filesystem::path path;
    const std::map<std::string, TensorView>* tensors;
  };
  Result<void> add(const std::filesystem::path& path,
                   const std::map<std::string, TensorView>& tensors);
  static Result<WeightFiles> open_index(const std::filesystem::path& dir,
                                        const std::filesystem::path& index_path);

  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::vector<std::shared_ptr<const TorchCheckpoint>> torch_files_;
  std::vector<Source> sources_;
  std::map<std::string, std::size_t> file_of_;  // tensor name -> index into sources_
};

}  // namespace weft
