#include "compiler/program_serialize.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

#include "common/check.h"

namespace torch_tpu::compiler {
namespace {

constexpr char kTag[4] = {'T', 'P', 'P', '1'};
constexpr int kMaxReturnDepth = 4;

class Writer {
 public:
  template <typename T>
  void put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_.append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  template <typename T>
  void put_vec(const std::vector<T>& v) {
    put(static_cast<uint32_t>(v.size()));
    if (!v.empty()) out_.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void put_raw(const char* p, size_t n) { out_.append(p, n); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  template <typename T>
  T get(const char* what) {
    static_assert(std::is_trivially_copyable_v<T>);
    TPU_CHECK(in_.size() - pos_ >= sizeof(T), "program entry truncated reading ", what);
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  // A count of elements of `elem_size` bytes each that must still fit in the input.
  size_t count(size_t elem_size, const char* what) {
    auto n = get<uint32_t>(what);
    TPU_CHECK(static_cast<uint64_t>(n) * elem_size <= in_.size() - pos_, "program entry: ", what, " count ", n,
              " exceeds the remaining ", in_.size() - pos_, " bytes");
    return n;
  }
  template <typename T>
  std::vector<T> get_vec(const char* what) {
    size_t n = count(sizeof(T), what);
    std::vector<T> v(n);
    if (n) std::memcpy(v.data(), in_.data() + pos_, n * sizeof(T));
    pos_ += n * sizeof(T);
    return v;
  }
  void expect_raw(const char* p, size_t n, const char* what) {
    TPU_CHECK(in_.size() - pos_ >= n && std::memcmp(in_.data() + pos_, p, n) == 0, "program entry: bad ", what);
    pos_ += n;
  }
  bool done() const { return pos_ == in_.size(); }
  size_t left() const { return in_.size() - pos_; }

 private:
  std::string_view in_;
  size_t pos_ = 0;
};

void put_return(Writer& w, const ReturnSpec& r) {
  w.put(static_cast<uint8_t>(r.kind));
  w.put(r.index);
  w.put(static_cast<uint32_t>(r.items.size()));
  for (const auto& item : r.items) put_return(w, item);
  if (r.kind == ReturnSpec::Kind::View || r.kind == ReturnSpec::Kind::NewView) {
    w.put_vec(r.view.sizes);
    w.put_vec(r.view.strides);
    w.put(r.view.offset);
    w.put_vec(r.view.base_sizes);
    w.put_vec(r.view.base_strides);
  }
}

// Smallest encoded ReturnSpec: kind u8 + index i32 + item count u32.
constexpr size_t kMinReturnBytes = 1 + 4 + 4;

ReturnSpec get_return(Reader& r, int depth, size_t bindings_bound, size_t new_count) {
  TPU_CHECK(depth <= kMaxReturnDepth, "program entry: returns nest deeper than ", kMaxReturnDepth);
  ReturnSpec spec;
  auto kind = r.get<uint8_t>("return kind");
  TPU_CHECK(kind <= static_cast<uint8_t>(ReturnSpec::Kind::NewView), "program entry: bad return kind ",
            static_cast<int>(kind));
  spec.kind = static_cast<ReturnSpec::Kind>(kind);
  spec.index = r.get<int32_t>("return index");
  if (spec.kind == ReturnSpec::Kind::New || spec.kind == ReturnSpec::Kind::NewView) {
    TPU_CHECK(spec.index >= 0 && static_cast<size_t>(spec.index) < new_count, "program entry: return index ",
              spec.index, " out of range");
  } else if (spec.kind == ReturnSpec::Kind::Binding || spec.kind == ReturnSpec::Kind::View) {
    TPU_CHECK(spec.index >= 0 && static_cast<size_t>(spec.index) < bindings_bound, "program entry: bad binding ",
              spec.index);
  }
  size_t items = r.count(kMinReturnBytes, "return items");
  TPU_CHECK(items == 0 || spec.kind == ReturnSpec::Kind::List, "program entry: items on a non-list return");
  spec.items.reserve(items);
  for (size_t i = 0; i < items; ++i) {
    spec.items.push_back(get_return(r, depth + 1, bindings_bound, new_count));
    TPU_CHECK(spec.items.back().kind == ReturnSpec::Kind::New || spec.items.back().kind == ReturnSpec::Kind::Binding,
              "program entry: a list return holds only new or argument tensors");
  }
  if (spec.kind == ReturnSpec::Kind::View || spec.kind == ReturnSpec::Kind::NewView) {
    BindingView& v = spec.view;
    v.sizes = r.get_vec<int64_t>("view sizes");
    v.strides = r.get_vec<int64_t>("view strides");
    v.offset = r.get<int64_t>("view offset");
    v.base_sizes = r.get_vec<int64_t>("view base sizes");
    v.base_strides = r.get_vec<int64_t>("view base strides");
    auto non_negative = [](const std::vector<int64_t>& xs) {
      return std::all_of(xs.begin(), xs.end(), [](int64_t x) { return x >= 0; });
    };
    // The view's bounds are checked against the tensor's storage when it is taken (as_strided).
    TPU_CHECK(v.sizes.size() == v.strides.size() && v.base_sizes.size() == v.base_strides.size() &&
                  non_negative(v.sizes) && non_negative(v.strides) && non_negative(v.base_sizes) &&
                  non_negative(v.base_strides),
              "program entry: bad view return");
  }
  return spec;
}

// Dimensions are non-negative and their product (zeros counted as ones) stays under
// kMaxElements, so no size computation downstream overflows.
constexpr int64_t kMaxElements = int64_t{1} << 48;
constexpr size_t kMaxRank = 64;

void check_shape(const std::vector<int64_t>& shape, const char* what, size_t index) {
  TPU_CHECK(shape.size() <= kMaxRank, "program entry: ", what, " ", index, " has rank ", shape.size());
  int64_t elems = 1;
  for (int64_t d : shape) {
    TPU_CHECK(d >= 0, "program entry: ", what, " ", index, " has a negative dimension");
    // Zero dimensions count as one: strides multiply the others even when there are no elements.
    const int64_t f = std::max<int64_t>(d, 1);
    TPU_CHECK(elems <= kMaxElements / f, "program entry: ", what, " ", index, " is too large");
    elems *= f;
  }
}

}  // namespace

std::string serialize_program(const Program& p) {
  Writer w;
  w.put_raw(kTag, sizeof(kTag));
  w.put(static_cast<uint32_t>(p.graph.size()));
  for (const ir::Node& n : p.graph.nodes()) {
    w.put(static_cast<uint8_t>(n.kind));
    w.put(static_cast<int8_t>(n.dtype));
    w.put_vec(n.shape);
    w.put_vec(n.operands);
    w.put_vec(n.iattrs);
    w.put_vec(n.fattrs);
  }
  w.put(static_cast<uint32_t>(p.outputs.size()));
  for (const auto& o : p.outputs) {
    w.put(o.node);
    w.put(o.target);
    w.put(o.new_index);
    w.put(static_cast<uint8_t>(o.snapshot));
  }
  w.put(static_cast<uint32_t>(p.new_tensors.size()));
  for (const auto& t : p.new_tensors) {
    w.put(static_cast<int8_t>(t.dtype));
    w.put_vec(t.shape);
    w.put(static_cast<uint8_t>(t.channels_last));
  }
  w.put(static_cast<uint32_t>(p.returns.size()));
  for (const auto& r : p.returns) put_return(w, r);
  w.put(static_cast<uint32_t>(p.host_outputs.size()));
  for (const auto& o : p.host_outputs) {
    w.put(o.node);
    w.put(o.target);
  }
  w.put(p.rng_counters);
  w.put(static_cast<uint8_t>(p.baked_scalars));
  return w.take();
}

Program deserialize_program(std::string_view bytes) {
  Reader r(bytes);
  r.expect_raw(kTag, sizeof(kTag), "tag");
  Program p;
  // Smallest node: kind + dtype + four empty vectors.
  size_t nodes = r.count(2 + 4 * 4, "node");
  p.graph.reserve(nodes);
  for (size_t i = 0; i < nodes; ++i) {
    ir::Node n;
    auto kind = r.get<uint8_t>("node kind");
    TPU_CHECK(kind < ir::kNumOpKinds, "program entry: node ", i, " has op kind ", static_cast<int>(kind));
    n.kind = static_cast<ir::OpKind>(kind);
    auto dtype = r.get<int8_t>("node dtype");
    TPU_CHECK(ir::is_valid_dtype(dtype), "program entry: node ", i, " has dtype code ", static_cast<int>(dtype));
    n.dtype = static_cast<ir::DType>(dtype);
    n.shape = r.get_vec<int64_t>("shape");
    check_shape(n.shape, "node", i);
    n.operands = r.get_vec<int32_t>("operands");
    for (int32_t o : n.operands) {
      TPU_CHECK(o >= 0 && static_cast<size_t>(o) < i, "program entry: node ", i, " has operand %", o);
    }
    n.iattrs = r.get_vec<int64_t>("iattrs");
    n.fattrs = r.get_vec<double>("fattrs");
    p.graph.add(std::move(n));
  }
  size_t outputs = r.count(13, "output");
  for (size_t i = 0; i < outputs; ++i) {
    OutputSpec o;
    o.node = r.get<int32_t>("output node");
    o.target = r.get<int32_t>("output target");
    o.new_index = r.get<int32_t>("output new index");
    const auto snapshot = r.get<uint8_t>("output snapshot flag");
    TPU_CHECK(snapshot <= 1, "program entry: bad output snapshot flag");
    o.snapshot = snapshot != 0;
    TPU_CHECK(o.node >= 0 && o.node < p.graph.size(), "program entry: output node %", o.node, " out of range");
    TPU_CHECK(o.target >= -1, "program entry: bad output target ", o.target);
    TPU_CHECK(o.target >= 0 || o.new_index >= 0, "program entry: output without a destination");
    TPU_CHECK(o.new_index >= -1, "program entry: bad output new index ", o.new_index);
    p.outputs.push_back(o);
  }
  size_t news = r.count(1 + 4 + 1, "new tensor");
  for (size_t i = 0; i < news; ++i) {
    NewTensorSpec t;
    auto dtype = r.get<int8_t>("new tensor dtype");
    TPU_CHECK(ir::is_valid_dtype(dtype) || dtype == static_cast<int8_t>(c10::kComplexFloat) ||
                  dtype == static_cast<int8_t>(c10::kComplexDouble),
              "program entry: new tensor dtype code ", static_cast<int>(dtype));
    t.dtype = static_cast<c10::ScalarType>(dtype);
    t.shape = r.get_vec<int64_t>("new tensor shape");
    check_shape(t.shape, "new tensor", i);
    const auto channels_last = r.get<uint8_t>("new tensor layout");
    TPU_CHECK(channels_last <= 1 && (channels_last == 0 || t.shape.size() == 4),
              "program entry: bad new tensor layout ", static_cast<int>(channels_last));
    t.channels_last = channels_last != 0;
    p.new_tensors.push_back(std::move(t));
  }
  for (const auto& o : p.outputs) {
    TPU_CHECK(o.new_index < 0 || static_cast<size_t>(o.new_index) < p.new_tensors.size(),
              "program entry: output new index ", o.new_index, " out of range");
    if (o.target >= 0) continue;
    const auto& spec = p.new_tensors[static_cast<size_t>(o.new_index)];
    const auto& node = p.graph.node(o.node);
    TPU_CHECK(spec_matches_node(spec, node), "program entry: new tensor ", o.new_index, " does not match node %",
              o.node);
  }
  size_t returns = r.count(kMinReturnBytes, "return");
  // Binding indices are checked against the call's bindings by the caller (validate_bindings);
  // here only against int32's range.
  for (size_t i = 0; i < returns; ++i) {
    p.returns.push_back(get_return(r, 0, static_cast<size_t>(INT32_MAX), p.new_tensors.size()));
  }
  size_t host_outputs = r.count(8, "host output");
  for (size_t i = 0; i < host_outputs; ++i) {
    OutputSpec o;
    o.node = r.get<int32_t>("host output node");
    o.target = r.get<int32_t>("host output target");
    TPU_CHECK(o.node >= 0 && o.node < p.graph.size() && o.target >= 0, "program entry: bad host output");
    p.host_outputs.push_back(o);
  }
  p.rng_counters = r.get<uint64_t>("rng counters");
  auto baked = r.get<uint8_t>("baked flag");
  TPU_CHECK(baked <= 1, "program entry: bad baked flag");
  p.baked_scalars = baked != 0;
  TPU_CHECK(r.done(), "program entry: ", r.left(), " trailing bytes");
  return p;
}

std::vector<int32_t> output_nodes(const Program& program) {
  std::vector<int32_t> nodes;
  nodes.reserve(program.outputs.size());
  for (const auto& o : program.outputs) nodes.push_back(o.node);
  return nodes;
}

}  // namespace torch_tpu::compiler
