#pragma once
// The engine configuration the actor tests share: the bundled weft-tiny on the CPU, with a
// small KV pool and two forward threads.

#include <string>

#include "weft/engine.hpp"

namespace weft::test_support {

inline EngineConfig tiny_config() {
  EngineConfig c;
  c.model_dir = std::string(WEFT_SOURCE_DIR) + "/models/weft-tiny";
  c.kv_budget_bytes = 64ll << 20;
  c.cpu_threads = 2;
  return c;
}

}  // namespace weft::test_support
