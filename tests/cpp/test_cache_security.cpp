// Trust in the program cache's disk tier (common/cache_auth.h, compiler/disk_cache.h):
// SHA-256/HMAC against the published vectors, entries forged without the key, directories
// reached through other users' links or renameable parents, the held directory descriptor,
// the key file's rules, and the deserializer's field checks (compiler/program_serialize.h).
// Runs as any user; the cases that need another owner use chown and run only as root.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>

#include "common/sha256.h"
#include "common/cache_auth.h"
#include "compiler/disk_cache.h"
#include "compiler/program_serialize.h"
#include "ir/verifier.h"

namespace torch_tpu::compiler {
namespace {

namespace fs = std::filesystem;

const std::string kKey(32, 'k');
constexpr uid_t kOtherUid = 54321;

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "tpu_cache_security_XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string hex(const Sha256Digest& d) {
  std::string s;
  char b[3];
  for (uint8_t x : d) {
    std::snprintf(b, sizeof(b), "%02x", x);
    s += b;
  }
  return s;
}

std::string sha(std::string_view s) {
  Sha256 h;
  h.update(s);
  return hex(h.finish());
}

std::string hmac(std::string_view key, std::string_view s) {
  HmacSha256 h(key);
  h.update(s);
  return hex(h.finish());
}

TEST(Sha256, PublishedVectors) {  // FIPS 180-2 appendix B
  EXPECT_EQ(sha(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 million;  // in uneven pieces, across block boundaries
  const std::string a(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    const size_t n = std::min(left, a.size());
    million.update(a.data(), n);
    left -= n;
  }
  EXPECT_EQ(hex(million.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(HmacSha256, Rfc4231Vectors) {
  EXPECT_EQ(hmac(std::string(20, '\x0b'), "Hi There"),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7");
  EXPECT_EQ(hmac("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  EXPECT_EQ(hmac(std::string(131, '\xaa'), "Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
}

fs::path only_entry(const std::string& dir) {
  fs::path found;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".tpp") found = e.path();
  }
  return found;
}

TEST(DiskCacheDisk, AnEntryWrittenWithAnotherKeyIsDiscardedAsCorrupt) {
  TempDir tmp;
  DiskCache attacker(tmp.path.string(), "v", 1 << 20, std::string(32, 'A'));
  ASSERT_TRUE(attacker.store({7}, "planted"));  // valid magic, lengths and FNV checksum
  fs::path entry = only_entry(attacker.directory());
  DiskCache cache(tmp.path.string(), "v", 1 << 20, kKey);
  EXPECT_FALSE(cache.load({7}).has_value());
  EXPECT_EQ(cache.stats().corrupt, 1u);
  EXPECT_FALSE(fs::exists(entry));
  ASSERT_TRUE(cache.store({7}, "mine"));
  EXPECT_EQ(cache.load({7}).value_or(""), "mine");
}

TEST(DiskCacheDisk, LinksAndForeignFilesInTheDirectoryAreNeverRead) {
  TempDir tmp;
  DiskCache cache(tmp.path.string(), "v", 1 << 20, kKey);
  ASSERT_TRUE(cache.store({1}, "one"));
  fs::path entry = only_entry(cache.directory());
  fs::path moved = tmp.path / "elsewhere.tpp";
  fs::rename(entry, moved);
  fs::create_symlink(moved, entry);  // a valid entry, reached through a link
  EXPECT_FALSE(cache.load({1}).has_value());
  EXPECT_TRUE(fs::exists(moved));
  fs::remove(entry);
  fs::copy_file(moved, entry);
  ::chmod(entry.c_str(), 0644);  // readable by others: not written by the cache
  EXPECT_FALSE(cache.load({1}).has_value());
  ::chmod(entry.c_str(), 0600);
  EXPECT_FALSE(fs::exists(entry)) << "discarded";
}

TEST(DiskCacheDisk, TheHeldDirectoryIsUsedAfterTheTreeIsSwapped) {
  TempDir tmp;
  fs::path root = tmp.path / "cache";
  DiskCache cache(root.string(), "v", 1 << 20, kKey);
  ASSERT_TRUE(cache.enabled());
  ASSERT_TRUE(cache.store({1}, "genuine"));
  // Rename the checked tree away and put another tree (a valid entry of another cache) in place.
  fs::rename(root, tmp.path / "away");
  {
    DiskCache other(root.string(), "v", 1 << 20, kKey);
    ASSERT_TRUE(other.store({1}, "planted"));
    ASSERT_TRUE(other.store({2}, "planted"));
  }
  EXPECT_EQ(cache.load({1}).value_or(""), "genuine");
  EXPECT_FALSE(cache.load({2}).has_value());
  ASSERT_TRUE(cache.store({3}, "three"));
  EXPECT_TRUE(fs::exists(tmp.path / "away" / "v"));
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path / "away" / "v"), fs::directory_iterator()), 2);
  EXPECT_EQ(std::distance(fs::directory_iterator(root / "v"), fs::directory_iterator()), 2);
}

TEST(DiskCacheDisk, ARelativeRootIsResolvedOnce) {
  TempDir tmp;
  fs::create_directory(tmp.path / "a");
  fs::create_directory(tmp.path / "b");
  const fs::path cwd = fs::current_path();
  fs::current_path(tmp.path / "a");
  DiskCache cache("rel", "v", 1 << 20, kKey);
  fs::current_path(tmp.path / "b");
  ASSERT_TRUE(cache.enabled());
  ASSERT_TRUE(cache.store({1}, "x"));
  fs::current_path(cwd);
  EXPECT_EQ(cache.directory(), (tmp.path / "a" / "rel" / "v").string());
  EXPECT_TRUE(fs::exists(tmp.path / "a" / "rel" / "v"));
  EXPECT_FALSE(fs::exists(tmp.path / "b" / "rel"));
}

TEST(DiskCacheDisk, AncestorsOthersCanRenameInAreRefused) {
  TempDir tmp;
  fs::path open_parent = tmp.path / "open";
  fs::create_directory(open_parent);
  ::chmod(open_parent.c_str(), 0777);
  std::string why;
  EXPECT_LT(open_trusted_dir((open_parent / "cache").string(), true, true, why), 0);
  EXPECT_NE(why.find(open_parent.string()), std::string::npos) << why;
  EXPECT_NE(why.find("not sticky"), std::string::npos) << why;
  EXPECT_FALSE(fs::exists(open_parent / "cache"));
  EXPECT_FALSE(DiskCache((open_parent / "cache").string(), "v", 1 << 20, kKey).enabled());
  // Sticky (as /tmp): others cannot rename what they do not own.
  ::chmod(open_parent.c_str(), 01777);
  DiskCache sticky((open_parent / "cache").string(), "v", 1 << 20, kKey);
  EXPECT_TRUE(sticky.enabled());
}

TEST(DiskCacheDisk, OtherUsersDirectoriesAndLinksAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to chown to another user";
  TempDir tmp;
  fs::path theirs = tmp.path / "theirs";
  fs::create_directory(theirs);
  ::chmod(theirs.c_str(), 0700);
  ASSERT_EQ(::chown(theirs.c_str(), kOtherUid, kOtherUid), 0);
  EXPECT_FALSE(DiskCache(theirs.string(), "v", 1 << 20, kKey).enabled());
  std::string why;
  EXPECT_LT(open_trusted_dir((theirs / "sub").string(), true, false, why), 0);
  EXPECT_NE(why.find("owned by another user (uid 54321)"), std::string::npos) << why;
  // A link owned by another user to a private directory of ours.
  fs::path mine = tmp.path / "mine";
  fs::create_directory(mine);
  ::chmod(mine.c_str(), 0700);
  fs::path link = tmp.path / "link";
  fs::create_symlink(mine, link);
  EXPECT_TRUE(DiskCache(link.string(), "v", 1 << 20, kKey).enabled()) << "our own link is followed";
  ASSERT_EQ(::lchown(link.c_str(), kOtherUid, kOtherUid), 0);
  EXPECT_LT(open_trusted_dir(link.string(), true, true, why), 0);
  EXPECT_NE(why.find("symbolic link owned by another user"), std::string::npos) << why;
  EXPECT_FALSE(DiskCache(link.string(), "w", 1 << 20, kKey).enabled());
  EXPECT_FALSE(fs::exists(mine / "w"));
}

TEST(CacheKey, CreatedPrivateReusedAndRefusedWhenExposed) {
  TempDir tmp;
  const fs::path path = tmp.path / "conf" / "cache.key";
  std::string why;
  auto key = load_or_create_key(path.string(), why);
  ASSERT_TRUE(key.has_value()) << why;
  EXPECT_EQ(key->size(), kCacheKeyBytes);
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::mask, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(load_or_create_key(path.string(), why).value_or(""), *key);
  EXPECT_EQ(std::distance(fs::directory_iterator(tmp.path / "conf"), fs::directory_iterator()), 1)
      << "no temporary file left";
  TempDir other;
  EXPECT_NE(load_or_create_key((other.path / "cache.key").string(), why).value_or(*key), *key) << "random";
  ::chmod(path.c_str(), 0640);
  EXPECT_FALSE(load_or_create_key(path.string(), why).has_value());
  EXPECT_NE(why.find("group or others"), std::string::npos) << why;
  ::chmod(path.c_str(), 0600);
  fs::resize_file(path, 16);
  EXPECT_FALSE(load_or_create_key(path.string(), why).has_value());
  fs::remove(path);
  fs::create_symlink(other.path / "cache.key", path);
  EXPECT_FALSE(load_or_create_key(path.string(), why).has_value()) << "a link is not followed";
  fs::remove(path);
  if (::geteuid() == 0) {
    ASSERT_TRUE(load_or_create_key(path.string(), why).has_value());
    ASSERT_EQ(::chown(path.c_str(), kOtherUid, kOtherUid), 0);
    EXPECT_FALSE(load_or_create_key(path.string(), why).has_value());
    EXPECT_NE(why.find("owned by another user"), std::string::npos) << why;
  }
}

// -- the deserializer's field checks -------------------------------------------------------

Program valid_program() {
  Program p;
  p.graph.add(ir::Node{ir::OpKind::kParameter, ir::DType::kF32, {2, 3}, {}, {0}, {}});
  p.graph.add(ir::Node{ir::OpKind::kParameter, ir::DType::kF32, {2, 3}, {}, {1}, {}});
  p.graph.add(ir::Node{ir::OpKind::kAdd, ir::DType::kF32, {2, 3}, {0, 1}, {}, {}});
  p.outputs.push_back({2, -1, 0});
  p.new_tensors.push_back({c10::kFloat, {2, 3}});
  p.returns.push_back(ReturnSpec{ReturnSpec::Kind::New, 0, {}});
  return p;
}

// Rebuilds p's graph with node `id` changed by `f` (Graph has no mutable node access).
void edit_node(Program& p, int32_t id, const std::function<void(ir::Node&)>& f) {
  std::vector<ir::Node> nodes = p.graph.nodes();
  f(nodes.at(static_cast<size_t>(id)));
  p.graph = ir::Graph();
  for (auto& n : nodes) p.graph.add(std::move(n));
}

TEST(ProgramSerialize, EveryBadFieldIsRejected) {
  ASSERT_NO_THROW(deserialize_program(serialize_program(valid_program())));
  auto node = [](int32_t id, std::function<void(ir::Node&)> f) {
    return [id, f](Program& p) { edit_node(p, id, f); };
  };
  std::vector<std::pair<const char*, std::function<void(Program&)>>> cases = {
      {"operand of a later node", node(2, [](ir::Node& n) { n.operands = {0, 2}; })},
      {"negative operand", node(2, [](ir::Node& n) { n.operands = {-1, 1}; })},
      {"op kind out of range", node(2, [](ir::Node& n) { n.kind = static_cast<ir::OpKind>(250); })},
      {"dtype out of range", node(2, [](ir::Node& n) { n.dtype = static_cast<ir::DType>(100); })},
      {"negative dimension", node(0, [](ir::Node& n) { n.shape = {2, -3}; })},
      {"overflowing shape", node(0, [](ir::Node& n) { n.shape = {int64_t{1} << 40, int64_t{1} << 40}; })},
      {"output node out of range", [](Program& p) { p.outputs[0].node = 3; }},
      {"output new index out of range", [](Program& p) { p.outputs[0].new_index = 1; }},
      {"output target's new index out of range", [](Program& p) { p.outputs.push_back({2, 0, 5}); }},
      {"output without destination", [](Program& p) { p.outputs[0] = {2, -1, -1}; }},
      {"new tensor not matching its node", [](Program& p) { p.new_tensors[0].shape = {3, 2}; }},
      {"return of a missing new tensor", [](Program& p) { p.returns[0].index = 1; }},
      {"negative binding return", [](Program& p) { p.returns[0] = ReturnSpec{ReturnSpec::Kind::Binding, -1, {}}; }},
      {"host output node out of range", [](Program& p) { p.host_outputs.push_back({9, 0, -1}); }},
  };
  for (auto& [what, mutate] : cases) {
    Program p = valid_program();
    mutate(p);
    EXPECT_THROW(deserialize_program(serialize_program(p)), c10::Error) << what;
  }
}

// Random mutations of a valid payload: each is rejected by the deserializer or the verifier
// (both throw std::exception subclasses, which disk_tier treats as corruption), or decodes to
// a program the verifier accepts; never a crash.
TEST(ProgramSerialize, RandomMutationsAreRejectedOrVerified) {
  const std::string bytes = serialize_program(valid_program());
  std::mt19937 rng(43);
  int rejected = 0;
  for (int round = 0; round < 4000; ++round) {
    std::string bad = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = rng() % bad.size();
      bad[at] = static_cast<char>(rng() % 3 == 0 ? 0xff : bad[at] ^ (1 << (rng() % 8)));
    }
    try {
      Program p = deserialize_program(bad);
      ir::verify(p.graph);
    } catch (const std::exception&) {  // c10::Error (deserializer) or the verifier's error
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 3000);
}

}  // namespace
}  // namespace torch_tpu::compiler
