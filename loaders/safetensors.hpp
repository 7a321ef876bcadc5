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
class WeightFiles {
 public:
  // Opens `dir`/model.safetensors.index.json and its shards if present, otherwise
  // `dir`/model.safetensors. A tensor named twice, or an index naming a tensor its shard
  // lacks, is an error.
  static Result<WeightFiles> open_folder(const std::filesystem::path& dir);
  // Opens the given files as one set.
  static Result<WeightFiles> open_files(const std::vector<std::filesystem::path>& files);

  const TensorView* find(const std::string& name) const;
  // The file holding `name` ("" when absent).
  std::string origin(const std::string& name) const;
  std::vector<std::string> names() const;
  const std::vector<std::shared_ptr<const SafetensorsFile>>& files() const { return files_; }

 private:
  Result<void> add(std::shared_ptr<const SafetensorsFile> file);

  std::vector<std::shared_ptr<const SafetensorsFile>> files_;
  std::map<std::string, std::size_t> file_of_;  // tensor name -> index into files_
};

}  // namespace weft
