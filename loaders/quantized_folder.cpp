#include "loaders/quantized_folder.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "loaders/safetensors_writer.hpp"
#include "runtime/model/quantize_weights.hpp"

namespace weft {
namespace {

namespace fs = std::filesystem;

// The files besides the weights that a model folder needs: tokenizer, chat template,
// generation defaults. Weights, their indexes, config.json (rewritten) and files about the
// unquantized model (READMEs, evaluation figures) are not copied.
bool is_companion_file(const fs::path& path) {
  const std::string name = path.filename().string();
  const std::string ext = path.extension().string();
  if (ext == ".json") {
    for (const char* prefix : {"tokenizer", "special_tokens_map", "added_tokens",
                               "generation_config", "chat_template", "vocab"}) {
      if (name.starts_with(prefix)) return true;
    }
    return false;
  }
  return ext == ".jinja" || ext == ".tiktoken" || name == "tokenizer.model" ||
         name == "vocab.txt" || name == "merges.txt";
}

// Adds the "quantization" entry before config.json's closing brace, keeping the rest of the
// text (and its formatting) as it was. load_model has parsed the file as an object already.
Result<void> write_config(const fs::path& from, const fs::path& to, quant::QuantType type) {
  std::ifstream in(from, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  const auto open = text.find('{');
  const auto close = text.rfind('}');
  if (open == std::string::npos || close == std::string::npos || close < open) {
    return Error(ErrorCode::kParse, from.string() + ": not a JSON object");
  }
  const bool empty = text.find_first_not_of(" \t\r\n", open + 1) == close;
  const quant::QuantInfo& info = quant::quant_info(type);
  std::ostringstream entry;
  entry << (empty ? "\n" : ",\n") << "  \"quantization\": {\n"
        << "    \"format\": \"" << info.name << "\",\n"
        << "    \"block_size\": " << info.block << ",\n"
        << "    \"bits_per_weight\": " << info.bits_per_weight() << ",\n"
        << "    \"quantized\": \"linear weight matrices (attention, MLP, untied lm head); the "
           "token embedding, norms and biases keep their dtype\"\n"
        << "  }\n";
  // Trim the whitespace before the brace so the entry follows the last field directly.
  std::size_t end = close;
  while (end > open + 1 && std::isspace(static_cast<unsigned char>(text[end - 1])))
    --end;
  text = text.substr(0, end) + entry.str() + text.substr(close);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) return Error(ErrorCode::kIo, to.string() + ": cannot be written");
  return {};
}

}  // namespace

Result<QuantizedFolderStats> write_quantized_folder(
    const fs::path& source, const LoadedModel& loaded, quant::QuantType type, const fs::path& out,
    cpu::ThreadPool* pool, const std::function<void(std::size_t, std::size_t)>& progress) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (fs::equivalent(source, out, ec)) {
      return Error(ErrorCode::kInvalidArgument,
                   out.string() + " is the source folder; give a new folder");
    }
    if (!fs::is_directory(out, ec) || !fs::is_empty(out, ec)) {
      return Error(ErrorCode::kInvalidArgument,
                   out.string() + " exists and is not an empty folder");
    }
  }
  if (auto stored = loaded.model.weight_quantization(); stored != quant::QuantType::kNone) {
    return Error(ErrorCode::kInvalidArgument,
                 source.string() + " is already quantized (" +
                     std::string(quant::quant_info(stored).name) +
                     "); quantize the original F32/F16/BF16 checkpoint");
  }
  const WeightFiles& files = *loaded.weights;
  const auto names = model::quantizable_matrix_names(loaded.full_spec);
  const std::set<std::string> to_quantize(names.begin(), names.end());

  // Wider dtypes first, so f32/f16/bf16 data stays aligned; the U8 blocks go last.
  std::vector<std::string> order = files.names();
  auto width = [&](const std::string& n) {
    return to_quantize.count(n) ? std::size_t{0} : dtype_size(files.find(n)->dtype);
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](const std::string& a, const std::string& b) { return width(a) > width(b); });
  std::vector<SafetensorsEntry> entries;
  QuantizedFolderStats stats;
  for (const auto& name : order) {
    const TensorView& t = *files.find(name);
    stats.source_bytes += t.nbytes();
    if (to_quantize.count(name) && t.shape.size() == 2) {
      const auto bytes = quant::row_bytes(type, static_cast<std::size_t>(t.shape[1]));
      entries.push_back({name, DType::kU8, {t.shape[0], static_cast<std::int64_t>(bytes)}});
      ++stats.quantized_tensors;
    } else {
      entries.push_back({name, t.dtype, t.shape});
    }
  }
  stats.tensors = entries.size();

  fs::create_directories(out, ec);
  if (ec) {
    return Error(ErrorCode::kIo, out.string() + ": cannot be created (" + ec.message() + ")");
  }
  std::size_t done = 0;
  const std::string format_name(quant::quant_info(type).name);
  auto ok = write_safetensors(
      out / "model.safetensors", entries, {{"format", "pt"}, {"weft_quantization", format_name}},
      [&](std::size_t i) -> Result<TensorView> {
        const TensorView& t = *files.find(entries[i].name);
        done += t.nbytes();
        Result<TensorView> view = t;
        if (entries[i].dtype == DType::kU8 && t.dtype != DType::kU8) {
          view = model::quantize_matrix(entries[i].name, t, type, pool);
          if (!view) {
            return Error(view.error().code(),
                         files.origin(entries[i].name) + ": " + view.error().what());
          }
        }
        if (progress) progress(done, stats.source_bytes);
        return view;
      });
  if (!ok) return ok.error();
  if (auto c = write_config(source / "config.json", out / "config.json", type); !c) {
    return c.error();
  }
  for (const auto& entry : fs::directory_iterator(source, ec)) {
    if (!entry.is_regular_file() || !is_companion_file(entry.path())) continue;
    fs::copy_file(entry.path(), out / entry.path().filename(), fs::copy_options::overwrite_existing,
                  ec);
    if (ec) {
      return Error(ErrorCode::kIo,
                   entry.path().string() + ": cannot be copied (" + ec.message() + ")");
    }
  }
  stats.written_bytes = fs::file_size(out / "model.safetensors", ec);
  return stats;
}

}  // namespace weft
