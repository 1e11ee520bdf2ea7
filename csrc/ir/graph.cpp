#include "ir/graph.h"

#include <bit>

namespace torch_tpu::ir {
namespace {

// 64-bit mixing (the splitmix64 finalizer): every input bit affects every output bit, so
// combining small integers such as dims and ids does not collide the way XOR-shift sums do.
constexpr uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

constexpr uint64_t combine(uint64_t h, uint64_t v) {
  return mix(h ^ (v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)));
}

// Lists are prefixed by their length so ([1],[2,3]) and ([1,2],[3]) hash differently.
template <typename T, typename F>
uint64_t combine_list(uint64_t h, const std::vector<T>& xs, F to_bits) {
  h = combine(h, xs.size());
  for (const T& x : xs) h = combine(h, to_bits(x));
  return h;
}

}  // namespace

int64_t Node::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

uint64_t hash_node(const Node& node) {
  auto as_u64 = [](auto v) { return static_cast<uint64_t>(v); };
  uint64_t h = mix(static_cast<uint64_t>(node.kind) |
                   (static_cast<uint64_t>(static_cast<uint8_t>(node.dtype)) << 8));
  h = combine_list(h, node.shape, as_u64);
  h = combine_list(h, node.operands, as_u64);
  h = combine_list(h, node.iattrs, as_u64);
  h = combine_list(h, node.fattrs, [](double d) { return std::bit_cast<uint64_t>(d); });
  return h;
}

int32_t Graph::add(Node node) {
  uint64_t nh = hash_node(node);
  hash_ = combine(hash_, nh);
  node_hashes_.push_back(nh);
  nodes_.push_back(std::move(node));
  return static_cast<int32_t>(nodes_.size() - 1);
}

}  // namespace torch_tpu::ir
