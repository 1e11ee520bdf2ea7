// The dispatcher's side of the program cache's disk tier (compiler/disk_cache.h): stable keys,
// loading a stored program into a ready one, storing a freshly compiled one.
//
// Stable keys: the in-memory key's word 0 is the address of the op's OpInfo, which differs
// between processes; the disk key replaces it with a 64-bit FNV-1a hash of
// "qualname.overload" and the schema string (a changed schema misses). Every other key word is
// process-independent (dtype codes, sizes, tags, value bits; strings are FNV-1a hashed).
//
// Ops that bake scalar values: the dispatcher learns this from the first lowering and then
// keys the op on its scalar values. The program is stored under that baked key, and a marker
// entry under the unbaked key records "this op bakes scalars", so a fresh process that hits
// the marker sets OpInfo::bake_scalars, re-gathers and looks up the baked key.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "exec/call.h"

namespace torch_tpu::exec::disk_tier {

// True when the process has a disk tier (configured and not off).
bool enabled();

// Mixes a user lowering's fingerprint (torch_tpu.lowering.register_lowering: a hash of the
// lowering's code) into the op's stable key, so a program stored by an earlier version of the
// lowering is never loaded. Ops without one are covered by the package's own fingerprint.
void set_lowering_fingerprint(const std::string& name, const std::string& overload, const std::string& fingerprint);

// st.key with word 0 replaced by the op's stable identity.
std::vector<int64_t> stable_key(const c10::OperatorHandle& op, const CallState& st);

struct Lookup {
  std::shared_ptr<compiler::Program> program;  // compiled and ready to run, or null
  bool bakes_scalars = false;                  // the marker entry was found
};

// Looks st's call up on disk. A stored program is deserialized, verified, checked against the
// call's bindings (output targets, returns, and every parameter: a binding the call has, with
// its element count; rng parameters only in programs that draw) and compiled (finish_program);
// one that fails any step is discarded as corrupt and reported as a miss. Never throws; a miss
// when the disk tier is off.
Lookup load(const c10::OperatorHandle& op, const OpInfo& info, const CallState& st);

// Stores a freshly compiled program under st's key and, when `unbaked_key` is not empty (the
// lowering just reported baked scalars), the marker under it. Never throws.
void store(const c10::OperatorHandle& op, const CallState& st, const compiler::Program& program,
           const std::vector<int64_t>& unbaked_key);

}  // namespace torch_tpu::exec::disk_tier
