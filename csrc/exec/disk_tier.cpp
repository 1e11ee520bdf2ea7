#include "exec/disk_tier.h"

#include <algorithm>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

#include "common/hash.h"
#include "compiler/disk_cache.h"
#include "compiler/program_serialize.h"
#include "ir/ops.h"
#include "ir/verifier.h"

namespace torch_tpu::exec::disk_tier {
namespace {

// The marker payload (a program payload starts with "TPP1").
constexpr std::string_view kBakeMarker = "TPB1";

// Throws unless every binding index the program uses exists in this call.
void check_bindings(const compiler::Program& p, size_t bindings) {
  for (const auto& o : p.outputs) {
    TORCH_CHECK(o.target < 0 || static_cast<size_t>(o.target) < bindings, "output target ", o.target,
                " out of range");
  }
  std::function<void(const compiler::ReturnSpec&)> check = [&](const compiler::ReturnSpec& r) {
    TORCH_CHECK(r.kind != compiler::ReturnSpec::Kind::Binding || static_cast<size_t>(r.index) < bindings,
                "return binding ", r.index, " out of range");
    TORCH_CHECK(r.kind != compiler::ReturnSpec::Kind::View && r.kind != compiler::ReturnSpec::Kind::NewView,
                "a view return in a per-op program");
    for (const auto& item : r.items) check(item);
  };
  for (const auto& r : p.returns) check(r);
  TORCH_CHECK(p.host_outputs.empty(), "host outputs in a per-op program");
}

// Throws unless every parameter reads something this call binds, with as many elements as
// the binding has: the executor (and fused mode's composition, which indexes the call's
// sources by the parameter's binding) relies on it. A stored program only has to agree with the
// call whose key it is stored under, so this is checked here rather than in the deserializer.
void check_parameters(const compiler::Program& p, const std::vector<runtime::Binding>& bindings) {
  for (int32_t i = 0; i < p.graph.size(); ++i) {
    const ir::Node& n = p.graph.node(i);
    if (n.kind != ir::OpKind::kParameter) continue;
    TORCH_CHECK(n.iattrs.size() == 1, "parameter %", i, " without a binding");
    const int64_t b = n.iattrs[0];
    if (b < 0) {
      TORCH_CHECK((b == ir::kRngSeedBinding || b == ir::kRngOffsetBinding) && p.rng_counters > 0, "parameter %", i,
                  " reads rng binding ", b, " of a program that draws no random numbers");
      continue;
    }
    TORCH_CHECK(static_cast<size_t>(b) < bindings.size(), "parameter %", i, " reads binding ", b, " of ",
                bindings.size());
    const runtime::Binding& binding = bindings[static_cast<size_t>(b)];
    int64_t elems = 1;
    if (binding.kind == runtime::Binding::Kind::Tensor) {
      for (int64_t d : binding.sizes) elems *= d;
    }
    TORCH_CHECK(elems == n.numel(), "parameter %", i, " has ", n.numel(), " elements, binding ", b, " has ", elems);
  }
}

std::mutex g_fingerprints_mutex;
std::unordered_map<std::string, std::string>& fingerprints() {  // "name.overload" -> fingerprint
  static auto* map = new std::unordered_map<std::string, std::string>();
  return *map;
}

}  // namespace

void set_lowering_fingerprint(const std::string& name, const std::string& overload, const std::string& fingerprint) {
  std::lock_guard<std::mutex> lock(g_fingerprints_mutex);
  fingerprints()[name + "." + overload] = fingerprint;
}

bool enabled() { return compiler::process_disk_cache() != nullptr; }

std::vector<int64_t> stable_key(const c10::OperatorHandle& op, const CallState& st) {
  const auto& schema = op.schema();
  std::string id = schema.name() + "." + schema.overload_name();
  {
    // A user lowering of any overload of the op's functional form counts: `gelu.out` and
    // `gelu_` run the lowering registered for `gelu` (the functional variant, written back).
    std::string base = schema.name();
    if (!base.empty() && base.back() == '_') base.pop_back();
    base += ".";
    std::lock_guard<std::mutex> lock(g_fingerprints_mutex);
    std::vector<std::string> used;
    for (const auto& [name, fingerprint] : fingerprints()) {
      if (name.compare(0, base.size(), base) == 0) used.push_back(name + " " + fingerprint);
    }
    std::sort(used.begin(), used.end());  // the map's order is not stable across processes
    for (const std::string& u : used) id += "\nlowering " + u;
  }
  id += "\n" + c10::toString(schema);
  std::vector<int64_t> key = st.key;
  key[0] = static_cast<int64_t>(fnv1a(id.data(), id.size()));
  return key;
}

Lookup load(const c10::OperatorHandle& op, const OpInfo& info, const CallState& st) {
  DiskCache* disk = compiler::process_disk_cache();
  if (disk == nullptr) return {};
  std::vector<int64_t> key;
  std::optional<std::string> payload;
  try {
    key = stable_key(op, st);
    payload = disk->load(key);
  } catch (const std::exception&) {
    return {};
  }
  if (!payload) return {};
  if (*payload == kBakeMarker) return Lookup{nullptr, true};
  try {
    auto prog = std::make_shared<compiler::Program>(compiler::deserialize_program(*payload));
    TORCH_CHECK(!prog->baked_scalars || st.bake, "a baked program under an unbaked key");
    check_bindings(*prog, st.bindings.size());
    check_parameters(*prog, st.bindings);
    ir::verify(prog->graph);
    finish_program(*prog, compiler::output_nodes(*prog));
    return Lookup{std::move(prog), false};
  } catch (const std::exception& e) {
    std::string why = e.what();
    if (auto* c10e = dynamic_cast<const c10::Error*>(&e)) why = c10e->what_without_backtrace();
    disk->discard(key, why);
    return {};
  }
}

void store(const c10::OperatorHandle& op, const CallState& st, const compiler::Program& program,
           const std::vector<int64_t>& unbaked_key) {
  DiskCache* disk = compiler::process_disk_cache();
  if (disk == nullptr) return;
  try {
    disk->store(stable_key(op, st), compiler::serialize_program(program));
    if (!unbaked_key.empty()) disk->store(unbaked_key, kBakeMarker);
  } catch (const std::exception&) {
    // The disk tier is an optimization: a failed write only costs a later recompile.
  }
}

}  // namespace torch_tpu::exec::disk_tier
