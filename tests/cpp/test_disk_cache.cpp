// The program cache's disk tier (compiler/disk_cache.h) and program serialization
// (compiler/program_serialize.h): round trips, damaged entries, unsafe directories, eviction.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "compiler/disk_cache.h"
#include "compiler/program_serialize.h"

namespace torch_tpu::compiler {
namespace {

namespace fs = std::filesystem;

// The MAC key the tests' caches use (the process's key file is never touched here).
const std::string kKey(32, 'k');

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tpu_disk_cache_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

Program sample_program() {
  Program p;
  p.graph.add(ir::Node{ir::OpKind::kParameter, ir::DType::kF32, {2, 3}, {}, {0}, {}});
  p.graph.add(ir::Node{ir::OpKind::kConstant, ir::DType::kF32, {}, {}, {}, {1.5}});
  p.graph.add(ir::Node{ir::OpKind::kBroadcastInDim, ir::DType::kF32, {2, 3}, {1}, {}, {}});
  p.graph.add(ir::Node{ir::OpKind::kMul, ir::DType::kF32, {2, 3}, {0, 2}, {}, {}});
  p.outputs.push_back({3, -1, 0});
  p.outputs.push_back({3, 0, -1});
  p.new_tensors.push_back({c10::kFloat, {2, 3}});
  p.new_tensors.push_back({c10::kFloat, {1, 2, 2, 3}, /*channels_last=*/true});
  ReturnSpec list;
  list.kind = ReturnSpec::Kind::List;
  list.items.push_back(ReturnSpec{ReturnSpec::Kind::New, 0, {}});
  list.items.push_back(ReturnSpec{ReturnSpec::Kind::Binding, 0, {}});
  p.returns.push_back(ReturnSpec{ReturnSpec::Kind::New, 0, {}});
  p.returns.push_back(list);
  p.returns.push_back(ReturnSpec{ReturnSpec::Kind::Undefined, 0, {}});
  // A transposed view of binding 0, one row down: [3, 1] of the [2, 3] binding.
  p.returns.push_back(ReturnSpec{ReturnSpec::Kind::View, 0, {}, {{3, 1}, {1, 3}, 3, {2, 3}, {3, 1}}});
  // The second row of new tensor 0 (a saved slice of a computed value).
  p.returns.push_back(ReturnSpec{ReturnSpec::Kind::NewView, 0, {}, {{3}, {1}, 3, {2, 3}, {3, 1}}});
  p.host_outputs.push_back({3, 1, -1});
  p.rng_counters = 7;
  p.baked_scalars = true;
  return p;
}

void expect_same_returns(const ReturnSpec& a, const ReturnSpec& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.index, b.index);
  ASSERT_EQ(a.items.size(), b.items.size());
  for (size_t i = 0; i < a.items.size(); ++i) expect_same_returns(a.items[i], b.items[i]);
  EXPECT_EQ(a.view.sizes, b.view.sizes);
  EXPECT_EQ(a.view.strides, b.view.strides);
  EXPECT_EQ(a.view.offset, b.view.offset);
  EXPECT_EQ(a.view.base_sizes, b.view.base_sizes);
  EXPECT_EQ(a.view.base_strides, b.view.base_strides);
}

fs::path only_entry(const std::string& dir) {
  fs::path found;
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".tpp") {
      found = e.path();
      ++n;
    }
  }
  EXPECT_EQ(n, 1);
  return found;
}

TEST(ProgramSerialize, RoundTrip) {
  Program p = sample_program();
  Program q = deserialize_program(serialize_program(p));
  ASSERT_EQ(q.graph.size(), p.graph.size());
  for (int32_t i = 0; i < p.graph.size(); ++i) EXPECT_EQ(q.graph.node(i), p.graph.node(i));
  EXPECT_EQ(q.graph.hash(), p.graph.hash());
  ASSERT_EQ(q.outputs.size(), 2u);
  EXPECT_EQ(q.outputs[1].target, 0);
  EXPECT_EQ(q.outputs[0].new_index, 0);
  ASSERT_EQ(q.new_tensors.size(), 2u);
  EXPECT_EQ(q.new_tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(q.new_tensors[0].channels_last);
  EXPECT_EQ(q.new_tensors[1].shape, (std::vector<int64_t>{1, 2, 2, 3}));
  EXPECT_TRUE(q.new_tensors[1].channels_last);
  ASSERT_EQ(q.returns.size(), 5u);
  for (size_t i = 0; i < p.returns.size(); ++i) expect_same_returns(q.returns[i], p.returns[i]);
  ASSERT_EQ(q.host_outputs.size(), 1u);
  EXPECT_EQ(q.host_outputs[0].node, 3);
  EXPECT_EQ(q.host_outputs[0].target, 1);
  EXPECT_EQ(q.rng_counters, 7u);
  EXPECT_TRUE(q.baked_scalars);
  EXPECT_EQ(output_nodes(q), (std::vector<int32_t>{3, 3}));
}

TEST(ProgramSerialize, EveryTruncationAndByteFlipIsRejectedOrSafe) {
  std::string bytes = serialize_program(sample_program());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_THROW(deserialize_program(std::string_view(bytes.data(), n)), c10::Error) << "prefix " << n;
  }
  EXPECT_THROW(deserialize_program(bytes + "x"), c10::Error);
  // Flipped bytes either throw c10::Error or decode to something (the checksum and the verifier
  // catch the rest); they must never crash or allocate absurdly.
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (unsigned char x : {0x01, 0x80, 0xff}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ x);
      try {
        deserialize_program(bad);
      } catch (const c10::Error&) {
      }
    }
  }
}

TEST(ProgramSerialize, HugeCountsAreRejectedBeforeAllocating) {
  std::string bytes = "TPP1";
  bytes.append("\xff\xff\xff\x7f", 4);  // two billion nodes in eight bytes
  EXPECT_THROW(deserialize_program(bytes), c10::Error);
}

TEST(DiskCache, StoreLoadAndMiss) {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), "v-test", 1 << 20, kKey);
  ASSERT_TRUE(cache.enabled());
  std::vector<int64_t> key = {1, 2, 3, -4};
  EXPECT_FALSE(cache.load(key).has_value());
  ASSERT_TRUE(cache.store(key, "payload"));
  auto got = cache.load(key);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, "payload");
  EXPECT_FALSE(cache.load({1, 2, 3}).has_value());
  auto s = cache.stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 2u);
  EXPECT_EQ(s.writes, 1u);
  EXPECT_EQ(s.corrupt, 0u);
  EXPECT_GT(s.bytes, 0u);
  struct stat st {};
  ASSERT_EQ(::stat(cache.directory().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // A second instance (another process) sees the entry.
  DiskCache other(tmp.path.string(), "v-test", 1 << 20, kKey);
  EXPECT_EQ(other.load(key).value_or(""), "payload");
  // Another version directory does not.
  DiskCache upgraded(tmp.path.string(), "v-next", 1 << 20, kKey);
  EXPECT_FALSE(upgraded.load(key).has_value());
}

TEST(DiskCache, TruncatedAndFlippedEntriesAreDeletedAndMiss) {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), "v", 1 << 20, kKey);
  std::vector<int64_t> key = {42, 7};
  std::string payload(100, 'p');
  for (int variant = 0; variant < 3; ++variant) {
    ASSERT_TRUE(cache.store(key, payload));
    fs::path entry = only_entry(cache.directory());
    auto size = fs::file_size(entry);
    if (variant == 0) {
      fs::resize_file(entry, size - 10);  // truncated
    } else if (variant == 1) {
      fs::resize_file(entry, 5);  // shorter than the header
    } else {
      std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(static_cast<std::streamoff>(size - 3));
      f.put('X');  // a flipped payload byte
    }
    EXPECT_FALSE(cache.load(key).has_value()) << variant;
    EXPECT_FALSE(fs::exists(entry)) << variant;
    EXPECT_EQ(cache.stats().corrupt, static_cast<uint64_t>(variant + 1));
  }
  // Rewritten after the damage, it loads again.
  ASSERT_TRUE(cache.store(key, payload));
  EXPECT_EQ(cache.load(key).value_or(""), payload);
}

TEST(DiskCache, AnEntryForAnotherKeyIsAMissNotCorruption) {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), "v", 1 << 20, kKey);
  std::vector<int64_t> a = {1, 1}, b = {2, 2};
  ASSERT_TRUE(cache.store(a, "A"));
  fs::path entry_a = only_entry(cache.directory());
  ASSERT_TRUE(cache.store(b, "B"));
  // Simulate a hash collision: b's file name now holds a's (intact) entry.
  fs::path entry_b;
  for (const auto& e : fs::directory_iterator(cache.directory())) {
    if (e.path() != entry_a) entry_b = e.path();
  }
  fs::copy_file(entry_a, entry_b, fs::copy_options::overwrite_existing);
  EXPECT_FALSE(cache.load(b).has_value());
  EXPECT_EQ(cache.stats().corrupt, 0u);
  EXPECT_TRUE(fs::exists(entry_b));
  // Also when the other key is longer than the entry (a size check must not call it corrupt).
  std::vector<int64_t> long_key(50, 3);
  DiskCache shorter(tmp.path.string(), "v2", 1 << 20, kKey);
  ASSERT_TRUE(shorter.store({1}, ""));
  fs::path entry_short = only_entry(shorter.directory());
  ASSERT_TRUE(shorter.store(long_key, "L"));
  for (const auto& e : fs::directory_iterator(shorter.directory())) {
    if (e.path() != entry_short) fs::copy_file(entry_short, e.path(), fs::copy_options::overwrite_existing);
  }
  EXPECT_FALSE(shorter.load(long_key).has_value());
  EXPECT_EQ(shorter.stats().corrupt, 0u);
}

TEST(DiskCache, DiscardCountsCorruptionAndDeletes) {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), "v", 1 << 20, kKey);
  std::vector<int64_t> key = {9};
  ASSERT_TRUE(cache.store(key, "not a program"));
  ASSERT_TRUE(cache.load(key).has_value());
  cache.discard(key, "test");
  auto s = cache.stats();
  EXPECT_EQ(s.corrupt, 1u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_FALSE(cache.load(key).has_value());
}

TEST(DiskCache, RefusesADirectoryOthersCanWrite) {
  TempDir tmp;
  fs::path open_dir = tmp.path / "shared";
  fs::create_directory(open_dir);
  ::chmod(open_dir.c_str(), 0777);
  DiskCache cache(open_dir.string(), "v", 1 << 20, kKey);
  EXPECT_FALSE(cache.enabled());
  EXPECT_FALSE(cache.store({1}, "x"));
  EXPECT_FALSE(cache.load({1}).has_value());
  EXPECT_TRUE(fs::is_empty(open_dir));
  // A group-writable version directory inside a private root is refused too.
  fs::path root = tmp.path / "private";
  fs::create_directory(root);
  ::chmod(root.c_str(), 0700);
  fs::create_directory(root / "v");
  ::chmod((root / "v").c_str(), 0770);
  EXPECT_FALSE(DiskCache(root.string(), "v", 1 << 20, kKey).enabled());
  EXPECT_TRUE(DiskCache(root.string(), "w", 1 << 20, kKey).enabled());
}

TEST(DiskCache, CreatesMissingParentsPrivately) {
  TempDir tmp;
  fs::path root = tmp.path / "a" / "b";
  DiskCache cache(root.string(), "v", 1 << 20, kKey);
  ASSERT_TRUE(cache.enabled());
  struct stat st {};
  ASSERT_EQ(::stat(root.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
}

TEST(DiskCache, EvictsLeastRecentlyUsedBeyondTheBound) {
  TempDir tmp;
  const std::string payload(1000, 'x');
  const uint64_t entry_bytes = DiskCache::kHeaderBytes + 8 + payload.size();
  DiskCache cache(tmp.path.string(), "v", 10 * entry_bytes, kKey);
  // Entries get distinct mtimes (file systems keep them to a few milliseconds at worst).
  auto pause = [] { ::usleep(20000); };
  for (int64_t k = 0; k < 10; ++k) {
    ASSERT_TRUE(cache.store({k}, payload));
    pause();
  }
  EXPECT_EQ(cache.stats().evictions, 0u);  // exactly at the bound
  EXPECT_EQ(cache.stats().bytes, 10 * entry_bytes);
  ASSERT_TRUE(cache.load({0}).has_value());  // a hit makes entry 0 the most recently used
  pause();
  for (int64_t k = 10; k < 13; ++k) {
    ASSERT_TRUE(cache.store({k}, payload));
    pause();
  }
  auto s = cache.stats();
  EXPECT_EQ(s.evictions, 4u);  // twice over the bound, each time down to 90%
  EXPECT_LE(s.bytes, 10 * entry_bytes);
  EXPECT_TRUE(cache.load({0}).has_value()) << "the entry hit most recently survives";
  EXPECT_TRUE(cache.load({12}).has_value()) << "the newest entry survives";
  for (int64_t k = 1; k <= 4; ++k) EXPECT_FALSE(cache.load({k}).has_value()) << "least recently used " << k;
  EXPECT_TRUE(cache.load({5}).has_value());
}

TEST(DiskCache, OtherVersionsCountTowardsTheBoundAndGoFirst) {
  TempDir tmp;
  const std::string payload(1000, 'x');
  const uint64_t entry_bytes = DiskCache::kHeaderBytes + 8 + payload.size();
  {
    DiskCache old(tmp.path.string(), "v1-torch0-old", 100 * entry_bytes, kKey);
    for (int64_t k = 0; k < 5; ++k) ASSERT_TRUE(old.store({k}, payload));
  }
  fs::create_directory(tmp.path / "unrelated");
  std::ofstream(tmp.path / "unrelated" / "keep.tpp") << "not ours";
  ::usleep(20000);
  DiskCache cache(tmp.path.string(), "v1-torch0-new", 6 * entry_bytes, kKey);
  ASSERT_TRUE(cache.store({100}, payload));  // the first write scans: 6 entries, at the bound
  EXPECT_EQ(cache.stats().evictions, 0u);
  ASSERT_TRUE(cache.store({101}, payload));
  EXPECT_GT(cache.stats().evictions, 0u);
  EXPECT_TRUE(cache.load({100}).has_value()) << "the old version's entries go first";
  EXPECT_TRUE(cache.load({101}).has_value());
  EXPECT_TRUE(fs::exists(tmp.path / "unrelated" / "keep.tpp"));
}

TEST(DiskCache, AnotherProcesssEntriesAreNoticedAfterASixteenthOfTheBoundIsWritten) {
  TempDir tmp;
  const std::string payload(1000, 'x');
  const uint64_t entry_bytes = DiskCache::kHeaderBytes + 8 + payload.size();
  const uint64_t bound = 64 * entry_bytes;  // a rescan every 64 / kRescanFraction = 4 entries
  DiskCache mine(tmp.path.string(), "v", bound, kKey);
  // Another process sharing the root, started with a larger bound: it never evicts.
  DiskCache other(tmp.path.string(), "v", 1000 * entry_bytes, kKey);
  ASSERT_TRUE(mine.store({0}, payload));  // the first write scans: 1 entry
  for (int64_t k = 100; k < 170; ++k) ASSERT_TRUE(other.store({k}, payload));  // 71 entries now
  // mine's estimate is 1 entry: writes below a sixteenth of the bound do not rescan...
  for (int64_t k = 1; k <= 3; ++k) ASSERT_TRUE(mine.store({k}, payload));
  EXPECT_EQ(mine.stats().evictions, 0u);
  // ...and the write that completes it does, and finds the root over the bound.
  ASSERT_TRUE(mine.store({4}, payload));
  EXPECT_GT(mine.stats().evictions, 0u);
  EXPECT_LE(mine.stats().bytes, bound);
}

TEST(DiskCache, EntriesLargerThanTheBoundAreNotWritten) {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), "v", 100, kKey);
  EXPECT_FALSE(cache.store({1}, std::string(200, 'x')));
  EXPECT_EQ(cache.stats().writes, 0u);
}

}  // namespace
}  // namespace torch_tpu::compiler
