#pragma once
// main() of the tests that run over MPI ranks (`mpirun -np N TEST`): gtest, the world
// communicator handed to the tests, and one exit status on every rank.

#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <span>
#include <utility>

#include "runtime/parallel/communicator.hpp"
#include "runtime/parallel/mpi_communicator.hpp"

namespace weft::test_support {

// Joins the MPI world, keeps it in `hold(world)` where the tests reach it, runs every test, and
// returns 1 on every rank if any rank failed a test, else 0, so that mpirun's exit status is
// the same everywhere. `hold(nullptr)` is called at the end, before the world closes.
template <class Hold>
int mpi_gtest_main(int argc, char** argv, Hold&& hold) {
  ::testing::InitGoogleTest(&argc, argv);
  auto joined = parallel::mpi_world();
  if (!joined) {
    std::fprintf(stderr, "%s\n", joined.error().what());
    return 1;
  }
  std::shared_ptr<parallel::Communicator> world = std::move(joined.value());
  hold(world);
  const int failed = RUN_ALL_TESTS();
  float any = failed != 0 ? 1.0f : 0.0f;
  (void)world->all_reduce_sum(std::span<float>(&any, 1));
  hold(nullptr);
  world.reset();
  return any > 0 ? 1 : 0;
}

// The same for tests that reach the world through a global: a plain pointer, or a shared one
// (for an engine that keeps it).
inline int mpi_gtest_main(int argc, char** argv, parallel::Communicator*& global) {
  return mpi_gtest_main(
      argc, argv, [&](const std::shared_ptr<parallel::Communicator>& w) { global = w.get(); });
}
inline int mpi_gtest_main(int argc, char** argv, std::shared_ptr<parallel::Communicator>& global) {
  return mpi_gtest_main(argc, argv,
                        [&](std::shared_ptr<parallel::Communicator> w) { global = std::move(w); });
}

}  // namespace weft::test_support
