// Single-thread encode throughput of a tokenizer.json on a text file, in MB/s, with the same
// chunking as bench/tokenizers_bench.py (whole lines, chunks of at least 64 KiB) so the two
// programs encode the same strings; both print a hash of all ids to prove they agree.
//
// Usage: tokenizer_bench --tokenizer PATH --text FILE [--repeats N]

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "loaders/tokenizer_json.hpp"

namespace {

std::vector<std::string> chunks_of(const std::string& text, std::size_t chunk_bytes) {
  std::vector<std::string> chunks;
  std::string current;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    end = end == std::string::npos ? text.size() : end + 1;
    current.append(text, pos, end - pos);
    pos = end;
    if (current.size() >= chunk_bytes) chunks.push_back(std::move(current)), current.clear();
  }
  if (!current.empty()) chunks.push_back(std::move(current));
  return chunks;
}

int usage() {
  std::cerr << "usage: tokenizer_bench --tokenizer PATH --text FILE [--repeats N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path, text_path;
  int repeats = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--tokenizer")) {
      tokenizer_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--text")) {
      text_path = argv[i + 1];
    } else if (!std::strcmp(argv[i], "--repeats")) {
      repeats = std::max(1, std::atoi(argv[i + 1]));
    } else {
      return usage();
    }
  }
  if (tokenizer_path.empty() || text_path.empty()) return usage();
  const auto load_start = std::chrono::steady_clock::now();
  auto loaded = weft::loaders::load_tokenizer(tokenizer_path);
  if (!loaded) {
    std::cerr << "tokenizer_bench: " << loaded.error().what() << '\n';
    return 1;
  }
  const double load_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  std::ifstream in(text_path, std::ios::binary);
  if (!in) {
    std::cerr << "tokenizer_bench: cannot read " << text_path << '\n';
    return 1;
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const auto chunks = chunks_of(text, 1 << 16);
  const auto& tok = *loaded->tokenizer;

  double best_s = 1e30;
  std::uint64_t hash = 0, tokens = 0;
  for (int r = 0; r < repeats; ++r) {
    hash = 1469598103934665603ULL;  // FNV-1a 64 over the ids as little-endian uint32
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const auto& chunk : chunks) {
      auto ids = tok.encode(chunk, false);
      if (!ids) {
        std::cerr << "tokenizer_bench: " << ids.error().what() << '\n';
        return 1;
      }
      tokens += ids->size();
      for (std::uint32_t id : *ids) {
        for (int k = 0; k < 4; ++k)
          hash = (hash ^ ((id >> (8 * k)) & 0xFF)) * 1099511628211ULL;
      }
    }
    best_s = std::min(
        best_s, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::printf(
      "weft: %zu bytes, %zu chunks, %llu tokens, best of %d: %.3f s, %.2f MB/s, ids fnv1a %016llx, "
      "load %.2f s\n",
      text.size(), chunks.size(), static_cast<unsigned long long>(tokens), repeats, best_s,
      text.size() / best_s / 1e6, static_cast<unsigned long long>(hash), load_s);
  return 0;
}
