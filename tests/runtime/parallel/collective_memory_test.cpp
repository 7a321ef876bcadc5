// The names of the collective memory kinds (WEFT_TP_NCCL_BUFFERS) and what a backend without
// device memory answers when asked for some (docs/parallel.md, "NCCL buffers") or for a device
// window ("Fused all-reduce and norm").

#include <gtest/gtest.h>

#include <string>

#include "runtime/parallel/communicator.hpp"

namespace weft::parallel {
namespace {

TEST(CollectiveMemoryKind, NamesReadBack) {
  for (auto kind : {CollectiveMemoryKind::kPlain, CollectiveMemoryKind::kRegistered,
                    CollectiveMemoryKind::kSymmetric}) {
    auto parsed = parse_collective_memory_kind(collective_memory_kind_name(kind));
    ASSERT_TRUE(parsed) << collective_memory_kind_name(kind);
    EXPECT_EQ(*parsed, kind);
  }
  EXPECT_STREQ(collective_memory_kind_name(CollectiveMemoryKind::kSymmetric), "symmetric");
}

TEST(CollectiveMemoryKind, UnsetIsPlain) {
  auto parsed = parse_collective_memory_kind("");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(*parsed, CollectiveMemoryKind::kPlain);
}

TEST(CollectiveMemoryKind, UnknownNameIsRefusedNamingTheValues) {
  for (const char* bad : {"Symmetric", "nvls", "1", "symmetric "}) {
    auto parsed = parse_collective_memory_kind(bad);
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().code(), ErrorCode::kInvalidArgument);
    const std::string what = parsed.error().what();
    EXPECT_NE(what.find("WEFT_TP_NCCL_BUFFERS"), std::string::npos) << what;
    EXPECT_NE(what.find(std::string("'") + bad + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("plain, registered, symmetric"), std::string::npos) << what;
  }
}

// Host-buffer backends have no device memory to offer: the caller keeps its own.
TEST(CollectiveMemory, HostBackendsRefuseIt) {
  LocalCommunicator local;
  auto m = local.collective_memory(4096, CollectiveMemoryKind::kSymmetric);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(std::string(m.error().what()).find("local"), std::string::npos);
}

// Nor a device API for kernels that exchange data themselves (the fused all-reduce and norm):
// the caller keeps NCCL's all-reduce, told why.
TEST(DeviceWindow, HostBackendsRefuseIt) {
  LocalCommunicator local;
  auto w = local.device_window(4096, 16);
  ASSERT_FALSE(w);
  EXPECT_EQ(w.error().code(), ErrorCode::kUnsupported);
  EXPECT_NE(std::string(w.error().what()).find("local"), std::string::npos) << w.error().what();
}

}  // namespace
}  // namespace weft::parallel
