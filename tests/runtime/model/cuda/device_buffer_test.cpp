// CudaBuffer's ownership (runtime/model/cuda/device_buffer.hpp) with a counting allocator in
// place of cudaMalloc, so it runs without a GPU: memory adopted from elsewhere (a
// tensor-parallel group's collective memory) is never released by the buffer, and a reserve
// beyond it allocates the buffer's own again.

#include "runtime/model/cuda/device_buffer.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <utility>

namespace weft::model::cuda_detail {
namespace {

struct CountingMemory {
  static inline int allocations = 0, releases = 0;
  static cudaError_t allocate(void** ptr, std::size_t bytes) {
    *ptr = std::malloc(bytes);
    ++allocations;
    return *ptr != nullptr ? cudaSuccess : cudaErrorMemoryAllocation;
  }
  static void release(void* ptr) {
    std::free(ptr);
    ++releases;
  }
};
using Buffer = CudaBuffer<CountingMemory>;

TEST(DeviceBuffer, AdoptedMemoryIsNeverReleasedByTheBuffer) {
  CountingMemory::allocations = CountingMemory::releases = 0;
  alignas(16) static char elsewhere[4096];
  {
    Buffer b;
    ASSERT_EQ(b.reserve(64), cudaSuccess);
    EXPECT_TRUE(b.owned());
    b.adopt(elsewhere, sizeof elsewhere);  // releases its own first
    EXPECT_EQ(CountingMemory::releases, 1);
    EXPECT_FALSE(b.owned());
    EXPECT_EQ(b.get(), elsewhere);
    EXPECT_EQ(b.bytes(), sizeof elsewhere);
    ASSERT_EQ(b.reserve(1024), cudaSuccess);  // fits: still the adopted memory
    EXPECT_EQ(b.get(), elsewhere);
    EXPECT_EQ(CountingMemory::allocations, 1);
    Buffer moved(std::move(b));  // ownership travels with the pointer
    EXPECT_FALSE(moved.owned());
    EXPECT_TRUE(b.owned());
    EXPECT_EQ(b.get(), nullptr);
    ASSERT_EQ(moved.reserve(8192), cudaSuccess);  // beyond it: its own memory again
    EXPECT_NE(moved.get(), elsewhere);
    EXPECT_TRUE(moved.owned());
    EXPECT_EQ(CountingMemory::allocations, 2);
    EXPECT_EQ(CountingMemory::releases, 1);  // the adopted memory was not released
  }
  EXPECT_EQ(CountingMemory::releases, 2);  // the buffer's own, at destruction
}

TEST(DeviceBuffer, AdoptedMemoryGoesAtDestructionWithoutRelease) {
  CountingMemory::allocations = CountingMemory::releases = 0;
  alignas(16) static char elsewhere[256];
  {
    Buffer b;
    b.adopt(elsewhere, sizeof elsewhere);
    Buffer other;
    other = std::move(b);
    EXPECT_EQ(other.get(), elsewhere);
  }
  EXPECT_EQ(CountingMemory::allocations, 0);
  EXPECT_EQ(CountingMemory::releases, 0);
}

}  // namespace
}  // namespace weft::model::cuda_detail
