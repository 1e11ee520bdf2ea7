// The host runtime's scratch allocator (runtime/host/scratch_allocator.h): intermediates of a
// running program are recycled; everything else keeps the allocator it replaced.
#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <thread>

#include "runtime/host/scratch_allocator.h"

namespace torch_tpu::runtime::host {
namespace {

constexpr int64_t kFloats = 300000;  // 1.2 MB: above kMinScratchBytes

TEST(ScratchAllocator, RecyclesBlocksOfProgramsOnly) {
  release_scratch_cache();
  {
    ScratchScope scope;  // installs the allocator
  }
  const ScratchStats s0 = scratch_stats();
  void* first = nullptr;
  {
    ScratchScope scope;
    at::Tensor a = at::empty({kFloats});
    first = a.data_ptr();
    EXPECT_EQ(scratch_stats().misses, s0.misses + 1);
    EXPECT_GE(scratch_stats().live_bytes, s0.live_bytes + kFloats * 4);
  }
  EXPECT_EQ(scratch_stats().live_bytes, s0.live_bytes);
  EXPECT_GE(scratch_stats().cached_bytes, static_cast<uint64_t>(kFloats * 4));
  {
    ScratchScope scope;
    at::Tensor b = at::empty({kFloats});
    EXPECT_EQ(b.data_ptr(), first);  // the same block again: no fresh pages to fault in
    EXPECT_EQ(scratch_stats().hits, s0.hits + 1);
    b.fill_(2.f);
    EXPECT_EQ(b.sum().item<float>(), 2.f * kFloats);
    at::Tensor small = at::empty({16});  // below the threshold: the system allocator's
    EXPECT_EQ(scratch_stats().misses, s0.misses + 1);
  }
  const ScratchStats s1 = scratch_stats();
  at::Tensor outside = at::empty({kFloats});  // not in a program: untouched by the cache
  EXPECT_EQ(scratch_stats().hits, s1.hits);
  EXPECT_EQ(scratch_stats().misses, s1.misses);
  release_scratch_cache();
  EXPECT_EQ(scratch_stats().cached_bytes, 0u);
}

TEST(ScratchAllocator, RawAllocationsAndFreesOnOtherThreads) {
  c10::Allocator* cpu = c10::GetCPUAllocator();
  // ATen's raw_allocate asserts context == data, and raw_deallocate must find the owner of a
  // pointer from either allocator.
  void* outside = cpu->raw_allocate(kFloats * 4);
  at::Tensor kept;
  {
    ScratchScope scope;
    void* inside = cpu->raw_allocate(kFloats * 4);
    ASSERT_NE(inside, nullptr);
    cpu->raw_deallocate(inside);
    kept = at::ones({kFloats});
  }
  cpu->raw_deallocate(outside);
  const uint64_t cached = scratch_stats().cached_bytes;
  std::thread([t = std::move(kept)]() mutable {
    EXPECT_EQ(t.sum().item<float>(), static_cast<float>(kFloats));
    t = at::Tensor();  // the last reference dies on another thread
  }).join();
  EXPECT_GT(scratch_stats().cached_bytes, cached);
  release_scratch_cache();
}

}  // namespace
}  // namespace torch_tpu::runtime::host
