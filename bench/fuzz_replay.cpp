// Replays fuzz corpora through a fuzz target's entry point in an ordinary (release) build, with
// no libFuzzer and no sanitizer: the total time of the corpus, and its slowest inputs, show what
// the library itself costs per input (docs/reliability.md, "Fuzz target speed").
//
//   fuzz_replay_json_schema [--repeat N] [--top K] DIR_OR_FILE...
//
// Each input runs N times (default 1); the total wall and CPU time are printed, and the slowest K
// (default 10) inputs with their time per run. The entry point is the fuzz target's own source,
// linked into this program.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

struct Input {
  std::string path;
  std::string bytes;
  double ms = 0;
};

bool read_file(const std::filesystem::path& p, std::string& out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 1;
  std::size_t top = 10;
  std::vector<Input> inputs;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if ((arg == "--repeat" || arg == "--top") && i + 1 < argc) {
      const long v = std::strtol(argv[++i], nullptr, 10);
      if (v < (arg == "--top" ? 0 : 1)) {
        std::fprintf(stderr, "fuzz_replay: %s must be a positive number, not '%s'\n", arg.c_str(),
                     argv[i]);
        return 2;
      }
      if (arg == "--repeat")
        repeat = static_cast<int>(v);
      else
        top = static_cast<std::size_t>(v);
      continue;
    }
    if (arg == "--help" || arg == "-h") {
      std::printf(
          "usage: %s [--repeat N] [--top K] DIR_OR_FILE...\n"
          "Runs every file (folders: every regular file in them, sorted) through the fuzz\n"
          "target's entry point N times and prints the total time and the K slowest inputs.\n",
          argv[0]);
      return 0;
    }
    std::filesystem::path p(arg);
    std::vector<std::filesystem::path> files;
    std::error_code ec;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(p, ec))
        if (entry.is_regular_file()) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
    } else {
      files.push_back(p);
    }
    for (const auto& f : files) {
      Input in;
      in.path = f.string();
      if (!read_file(f, in.bytes)) {
        std::fprintf(stderr, "fuzz_replay: cannot read '%s'\n", in.path.c_str());
        return 2;
      }
      inputs.push_back(std::move(in));
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "fuzz_replay: no inputs (give corpus folders or files; --help)\n");
    return 2;
  }
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const std::clock_t cpu_start = std::clock();
  for (auto& in : inputs) {
    const auto t0 = Clock::now();
    for (int r = 0; r < repeat; ++r)
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(in.bytes.data()),
                             in.bytes.size());
    in.ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / repeat;
  }
  const double total = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  // CPU time too: on a shared machine the wall clock also counts the other processes' slices.
  const double cpu = 1000.0 * static_cast<double>(std::clock() - cpu_start) / CLOCKS_PER_SEC;
  std::printf("%zu inputs x %d: %.1f ms in all (%.1f ms CPU), %.3f ms per input\n", inputs.size(),
              repeat, total, cpu,
              total / static_cast<double>(inputs.size() * static_cast<std::size_t>(repeat)));
  std::sort(inputs.begin(), inputs.end(),
            [](const Input& a, const Input& b) { return a.ms > b.ms; });
  for (std::size_t i = 0; i < std::min(top, inputs.size()); ++i)
    std::printf("%10.3f ms  %7zu bytes  %s\n", inputs[i].ms, inputs[i].bytes.size(),
                inputs[i].path.c_str());
  return 0;
}
