#pragma once
// A progress line on stderr for the weights' upload to a GPU: redrawn in place on a terminal,
// one line per 10% otherwise (logs stay readable).

#include <cstddef>
#include <functional>
#include <string>

namespace weft::cli {

// A callback for EngineConfig::on_load_progress and make_forward_backend: prints
// "weights -> cuda:0 [#####     ] 52%  8.3 / 16.1 GB" and a last line with the time taken.
std::function<void(std::size_t done, std::size_t total)> upload_progress(std::string device);

}  // namespace weft::cli
