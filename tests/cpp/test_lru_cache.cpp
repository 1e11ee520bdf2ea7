// The bounded LRU shared by the in-memory caches (common/lru_cache.h; plain C++, no PyTorch).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "common/hash.h"
#include "common/lru_cache.h"

namespace torch_tpu {
namespace {

using Key = std::vector<int64_t>;

uint64_t hash_of(const Key& k) {
  uint64_t h = kFnvOffsetBasis;
  for (int64_t w : k) h = mix_word(h, w);
  return h;
}

TEST(LruCache, FindsWhatWasInsertedAndCountsHitsAndMisses) {
  LruCache<int> c(4);
  const Key a{1, 2, 3}, b{1, 2, 4};
  EXPECT_EQ(c.find(a, hash_of(a)), nullptr);
  c.insert(a, hash_of(a), 10);
  c.insert(b, hash_of(b), 20);
  ASSERT_NE(c.find(a, hash_of(a)), nullptr);
  EXPECT_EQ(*c.find(a, hash_of(a)), 10);
  EXPECT_EQ(*c.find(b, hash_of(b)), 20);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.stats().hits, 3u);
  EXPECT_EQ(c.stats().misses, 1u);
  EXPECT_EQ(c.stats().inserts, 2u);
}

TEST(LruCache, EvictsTheLeastRecentlyUsed) {
  LruCache<int> c(2);
  const Key a{1}, b{2}, d{3};
  c.insert(a, hash_of(a), 1);
  c.insert(b, hash_of(b), 2);
  ASSERT_NE(c.find(a, hash_of(a)), nullptr);  // a is now more recent than b
  c.insert(d, hash_of(d), 3);
  EXPECT_EQ(c.size(), 2u);
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_EQ(c.find(b, hash_of(b)), nullptr);
  EXPECT_NE(c.find(a, hash_of(a)), nullptr);
  EXPECT_NE(c.find(d, hash_of(d)), nullptr);
}

TEST(LruCache, KeysThatShareAHashAreToldApartByTheirWords) {
  LruCache<int> c(8);
  const Key a{1, 2}, b{3, 4};
  c.insert(a, 42, 1);  // a forced collision: the same hash for both keys
  c.insert(b, 42, 2);
  EXPECT_EQ(*c.find(a, 42), 1);
  EXPECT_EQ(*c.find(b, 42), 2);
  EXPECT_EQ(c.find(Key{5}, 42), nullptr);
  c.insert(Key{5}, 42, 3);
  c.clear();
  EXPECT_EQ(c.size(), 0u);
  EXPECT_EQ(c.find(a, 42), nullptr);
}

TEST(LruCache, InsertingAnEqualKeyReplacesItsValue) {
  LruCache<std::shared_ptr<int>> c(2);
  const Key a{7};
  c.insert(a, hash_of(a), std::make_shared<int>(1));
  c.insert(a, hash_of(a), std::make_shared<int>(2));  // a racing thread compiled it too
  EXPECT_EQ(c.size(), 1u);
  EXPECT_EQ(c.stats().inserts, 1u);
  EXPECT_EQ(**c.find(a, hash_of(a)), 2);
}

TEST(LruCache, CapacityZeroHoldsOne) {
  LruCache<int> c(0);
  EXPECT_EQ(c.capacity(), 1u);
  c.insert(Key{1}, hash_of(Key{1}), 1);
  c.insert(Key{2}, hash_of(Key{2}), 2);
  EXPECT_EQ(c.size(), 1u);
  EXPECT_NE(c.find(Key{2}, hash_of(Key{2})), nullptr);
}

TEST(Hash, MixWordIsFnv1aOverWholeWords) {
  // The arithmetic the program and fused-graph keys have always used: changing it would not
  // break a cache (in-memory only) but is pinned here so that a change is deliberate.
  EXPECT_EQ(mix_word(kFnvOffsetBasis, 0), kFnvOffsetBasis * kFnvPrime);
  EXPECT_EQ(mix_word(mix_word(kFnvOffsetBasis, 1), -1),
            (((kFnvOffsetBasis ^ 1ull) * 0x100000001b3ull) ^ ~0ull) * 0x100000001b3ull);
  const char bytes[] = "abc";
  EXPECT_EQ(fnv1a(bytes, 3), 0xe71fa2190541574bull);  // the published FNV-1a 64 of "abc"
}

}  // namespace
}  // namespace torch_tpu
