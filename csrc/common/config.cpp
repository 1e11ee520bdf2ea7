#include "common/config.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <system_error>

#include "common/check.h"

namespace torch_tpu::config {

const std::vector<EnvVar>& registry() {
  static const std::vector<EnvVar> vars = {
      {"TORCH_TPU_MODE", "strict",
       "Execution mode: `debug` (one op at a time, synchronous, errors at the call site), "
       "`strict` (one op at a time, asynchronous per-device queue) or `fused` (DeferAndFuse: ops "
       "are recorded and run as fused graphs at sync points). Python: torch_tpu.set_mode()."},
      {"TORCH_TPU_LAUNCH_BLOCKING", "0", "`1` selects debug mode (overrides TORCH_TPU_MODE)."},
      {"TORCH_TPU_DEFER_AND_FUSE", "0", "`1` selects fused mode (DeferAndFuse; overrides TORCH_TPU_MODE)."},
      {"TORCH_TPU_RUNTIME", "auto",
       "Runtime that executes programs: `host` (embedded, always available), `pjrt` (a PJRT plugin; "
       "fails naming what was looked for when there is none), `auto` (pjrt when "
       "TORCH_TPU_PJRT_PLUGIN is set or a plugin is discovered and usable, else host) or `jax` "
       "(development: every program runs as StableHLO on JAX's CPU backend; needs jax, see "
       "docs/stablehlo.md)."},
      {"TORCH_TPU_PJRT_PLUGIN", "",
       "Path of the PJRT C API plugin (`libtpu.so`, `xla_cuda_plugin.so`). Default: discovered in "
       "sys.path (`libtpu/libtpu.so`, `jax_plugins/xla_cuda13/xla_cuda_plugin.so`, "
       "`jax_plugins/xla_cuda12/xla_cuda_plugin.so`). Setting it selects the PJRT runtime."},
      {"TORCH_TPU_PJRT_OPTIONS", "",
       "PJRT client create options, `name=value,...` (`true`/`false`, integers, floats or strings), "
       "e.g. `preallocate=false,memory_fraction=0.5` for the CUDA plugin."},
      {"TORCH_TPU_PJRT_RESIDENT", "1",
       "PJRT runtime: keep program outputs on the device as PJRT buffers (uploaded and downloaded "
       "only when the host needs them). `0`: stage every program's inputs and outputs through host "
       "memory (for comparisons and debugging)."},
      {"TORCH_TPU_PJRT_INDEX_CHECKS", "1",
       "PJRT runtime: gathers and scatters check their indices on the device and an out-of-range "
       "index raises IndexError when the program ends, as on the host runtime (a program with a "
       "checked index then completes before the next one is launched). `0`: no checks; XLA "
       "clamps a gather's out-of-range index and drops a scatter's (silently wrong results)."},
      {"TORCH_TPU_PJRT_ASYNC", "1",
       "PJRT runtime: a queued program whose outputs stay on the device completes asynchronously "
       "(the stream waits for it before other work and at synchronization). `0`: wait for each "
       "program when it is launched."},
      {"TORCH_TPU_NUM_DEVICES", "1",
       "Number of emulated devices on the host runtime, 1 to 64 (other values raise ValueError at "
       "import). Unset under torchrun: `LOCAL_WORLD_SIZE` (so local rank r can use tpu:r)."},
      {"TORCH_TPU_HOST_MEMORY", "",
       "Capacity of each host-runtime device: bytes or a size with a unit (`512MiB`, `8GB`), at least "
       "1 byte and below 2^64 (other values raise ValueError at import). Default: half of physical "
       "RAM, at most 16 GiB."},
      {"TORCH_TPU_FALLBACK", "none",
       "`cpu` runs ops with no lowering on the CPU (warns once per op, counted in "
       "torch_tpu.metrics()); `none` raises NotImplementedError. Python: torch_tpu.set_fallback()."},
      {"TORCH_TPU_PROGRAM_CACHE_SIZE", "8192", "Programs kept in the in-memory program cache (LRU)."},
      {"TORCH_TPU_CACHE_DIR", "",
       "Directory of the program cache's disk tier, shared by processes of one user (created with "
       "mode 0700; made absolute and opened once at import; refused if another user owns it or can "
       "write it or a parent that is not sticky, or it is reached through another user's symbolic "
       "link). Default: `$XDG_CACHE_HOME/torch_tpu` or "
       "`~/.cache/torch_tpu`. `off` or empty disables the disk tier."},
      {"TORCH_TPU_CACHE_KEY_FILE", "",
       "File holding this user's secret key (32 random bytes, created on first use, mode 0600) that "
       "authenticates every disk-tier entry (HMAC-SHA256); entries without a valid MAC are discarded "
       "and recompiled. Must be outside the cache directory; refused if another user owns it or "
       "group/others can access it. Default: `$XDG_CONFIG_HOME/torch_tpu/cache.key` or "
       "`~/.config/torch_tpu/cache.key`."},
      {"TORCH_TPU_CACHE_MAX_BYTES", "1GiB",
       "Size bound of the disk tier: bytes or a size with a unit (`512MiB`, `2GB`); least recently "
       "used entries are deleted beyond it."},
      {"TORCH_TPU_INLINE_WORK", "32768",
       "Strict mode runs a program on the calling thread, instead of the stream's worker, when "
       "its stream is idle and its work estimate (elements produced; contractions x64) is at most "
       "this, or it is elementwise only (any size: memory-bound, it runs fastest over warm memory "
       "with ATen's threads). 0 queues everything."},
      {"TORCH_TPU_FUSED_MAX_OPS", "32",
       "Fused mode flushes a pending graph when it reaches this many recorded ops. Bounds graph "
       "growth in loops that never read a value on the host, and lets the device run one part of "
       "a step while Python records the next (larger graphs fuse more but overlap less)."},
      {"TORCH_TPU_FUSED_FIRST_OPS", "8",
       "Fused mode's slow start: after the host waited for the device (a host read, a "
       "synchronize), the first pending graph that holds a matrix product or convolution is "
       "flushed at this many ops, the next at twice as many, up to TORCH_TPU_FUSED_MAX_OPS, so "
       "the device starts on a step while Python records the rest. `0` turns it off."},
      {"TORCH_TPU_DEBUG_FUSION", "0",
       "`1` prints every fused graph when it is compiled (ops, clusters) and a line per flush "
       "(cause, ops, stores skipped) to stderr. Python: torch_tpu.set_debug_fusion()."},
      {"TORCH_TPU_FUSED_PROVENANCE", "1",
       "`1` records the user's source line for every op recorded in fused mode, so an error "
       "raised at a flush names the line that recorded the failing op; `0` saves that cost."},
      {"TORCH_TPU_HOST_FUSION", "1",
       "`0` turns off the host runtime's fused elementwise clusters (every IR node then runs as "
       "its own ATen kernel); read when a program is compiled."},
      {"TORCH_TPU_HOST_SCRATCH_CACHE", "1GiB",
       "Bytes of freed intermediate buffers (the CPU tensors a host-runtime program creates while it "
       "runs, 256 KiB and larger) kept for reuse by later programs, so a training loop does not "
       "page fresh memory in every step: bytes or a size with a unit. `0` returns every one to "
       "the system. torch.tpu.empty_cache() releases them."},
      {"TORCH_TPU_NATIVE_KERNELS", "64",
       "Host runtime: after how many runs a fused cluster gets a native kernel (C++ generated from "
       "its tile program that keeps each element's chain of arithmetic in vector registers, "
       "compiled in the background by the C++ compiler `CXX`, default `c++`, and loaded with "
       "dlopen; the cluster is interpreted until then, with the same bits). `0` or `off`: "
       "interpret always; `sync`: compile at a cluster's first run and wait (tests)."},
      {"TORCH_TPU_HOST_KERNEL_THREADS", "2",
       "Threads (the calling one included, at most the number of CPUs) that a large elementwise "
       "kernel (at least 128K elements) or fused cluster (elements times half its instruction "
       "count at least 128K) of the host runtime is split across when it runs on a stream "
       "worker, whose ATen kernels are single-threaded. The helpers sleep when idle. `1` turns "
       "splitting off; read at the first large kernel."},
      {"TORCH_TPU_HOST_HELP_SPIN_US", "2000",
       "A thread blocked waiting for a stream of the host runtime (at `.item()`, a host read or a "
       "synchronize) spins instead of sleeping and runs work the stream's worker offers: "
       "independent steps of a program and parts of split kernels. It goes back to "
       "sleeping after this many microseconds with nothing offered. `0` turns helping off; read at "
       "the first wait."},
      {"TORCH_TPU_COMPILE_MAX_SHAPES", "8",
       "torch.compile with dynamic shapes lowers one program per concrete input shape, for at "
       "most this many shapes per graph (each warns and counts as a specialization). A graph of "
       "one size symbol learns from three of them how its lowering depends on the size, then "
       "builds every further size from the learned graph without lowering (no limit, no warning; "
       "torch_tpu.metrics()['compile']['graph_instances']). Otherwise calls with further shapes "
       "run the graph's ops eagerly, in fused mode (debug mode: one at a time). "
       "Python: torch_tpu.compile.set_max_shapes()."},
      {"TORCH_TPU_COMPILE_BUCKETS", "auto",
       "torch.compile with dynamic shapes: run a graph learned across sizes (see "
       "TORCH_TPU_COMPILE_MAX_SHAPES) as one padded program per bucket of sizes, the padding masked "
       "out of every reduction, contraction and scatter so results equal the unpadded run. `auto`: "
       "on PJRT (where each size is an XLA compile) the default buckets, powers of two from 16 and "
       "from 128 on also the 1.5x steps between them (16, 32, 64, 128, 192, 256, 384, 512, ...: 8 "
       "programs per graph for 16..512); exact sizes on the host runtime. `on`: the default buckets "
       "on every runtime; `pow2`: powers of two from 16; `off`: exact sizes; or comma-separated sizes. A graph that cannot run "
       "padded warns once with the op and keeps exact sizes. Python: torch_tpu.compile.set_buckets()."},
      {"TORCH_TPU_LOG", "",
       "Comma-separated diagnostics printed to stderr as they happen: `recompiles` prints every "
       "recompilation (a per-op program compiled again for new input sizes, dtypes or strides, "
       "with the user's source line; a torch.compile graph recompiled by Dynamo or specialized "
       "for new shapes, with the guard or shapes that changed). Python: torch_tpu.set_recompile_log()."},
      {"TORCH_TPU_RECOMPILE_WARN", "100",
       "Warn once when this many recompilations (counted in torch_tpu.metrics()['recompiles']: eager "
       "per-op programs and torch.compile graphs, each kind against this count) have happened; "
       "`0` never warns. Python: torch_tpu.set_recompile_warn()."},
      {"TORCH_TPU_SHAPE_TEMPLATES", "1",
       "A per-op program miss at new sizes reuses the graph the op's lowering built at earlier "
       "sizes (same op, arguments, broadcast pattern and size equalities; learned from two "
       "lowerings, confirmed by a third) instead of running the Python lowering again; pointwise "
       "ops and listed structured ones (matmuls, reductions, softmax, norms, losses, embedding, "
       "attention). torch.compile's dynamic-shape graphs are learned alike, as a whole "
       "(compile/graph_templates.py). `0` lowers every miss and every compiled size. Python: "
       "torch_tpu.lowering.shape_templates.set_enabled(); counts in "
       "torch_tpu.metrics()['shape_templates']."},
      {"TORCH_TPU_VERIFY", "0",
       "`1` runs the IR verifier on every compiled program (always on in debug mode) and on the "
       "graph after each of the host planner's IR passes, and compares every lowering reused "
       "across sizes (TORCH_TPU_SHAPE_TEMPLATES) with a fresh one."},
  };
  return vars;
}

static const EnvVar& find(const char* name) {
  for (const auto& v : registry()) {
    if (std::string(v.name) == name) return v;
  }
  TORCH_CHECK(false, "torch_tpu: unregistered environment variable ", name);
}

std::string get(const char* name) {
  const EnvVar& var = find(name);
  const char* value = std::getenv(name);
  return value != nullptr ? std::string(value) : std::string(var.default_value);
}

std::optional<std::string> get_if_set(const char* name) {
  find(name);  // registered
  const char* value = std::getenv(name);
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

// The whole of v as an integer, or nullopt (not a number, trailing characters, out of int64).
static std::optional<int64_t> parse_int(const std::string& v) {
  int64_t out = 0;
  const char* end = v.data() + v.size();
  auto [ptr, ec] = std::from_chars(v.data(), end, out);
  if (v.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return out;
}

int64_t get_int(const char* name) {
  const std::string v = get(name);
  const std::optional<int64_t> out = parse_int(v);
  TPU_CHECK_VALUE(out.has_value(), name, "='", v, "' is not an integer (64-bit)");
  return *out;
}

int64_t get_int_in(const char* name, int64_t lo, int64_t hi) {
  const std::string v = get(name);
  const std::optional<int64_t> out = parse_int(v);
  TPU_CHECK_VALUE(out.has_value() && *out >= lo && *out <= hi, name, "='", v,
                  "' is out of range: expected an integer from ", lo, " to ", hi);
  return *out;
}

uint64_t get_size(const char* name, uint64_t lo) {
  const std::string text = get(name);
  try {
    const uint64_t v = parse_size(text);
    TPU_CHECK_VALUE(v >= lo, "size '", text, "' is below the minimum");
    return v;
  } catch (const c10::Error& e) {
    TPU_CHECK_VALUE(false, name, "='", text, "' is not a valid size: ", e.what_without_backtrace(), ". Expected ",
                    lo, " to 18446744073709551615 bytes, as a byte count or with a unit (e.g. 512MiB, 8GB)");
  }
}

bool get_bool(const char* name) {
  std::string v = get(name);
  return v == "1" || v == "true" || v == "TRUE" || v == "True" || v == "yes";
}

uint64_t parse_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const auto dots = std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(i), '.');
  TPU_CHECK_VALUE(std::isdigit(static_cast<unsigned char>(text[0])) && dots <= 1, "cannot parse size '", text,
                  "' (expected e.g. 8GB, 512MiB or a byte count)");
  double number = std::stod(text.substr(0, i));
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  for (auto& c : unit) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  double scale = 1;
  if (unit.empty() || unit == "b") scale = 1;
  else if (unit == "kb" || unit == "k") scale = 1e3;
  else if (unit == "mb" || unit == "m") scale = 1e6;
  else if (unit == "gb" || unit == "g") scale = 1e9;
  else if (unit == "tb" || unit == "t") scale = 1e12;
  else if (unit == "kib") scale = 1024.0;
  else if (unit == "mib") scale = 1024.0 * 1024;
  else if (unit == "gib") scale = 1024.0 * 1024 * 1024;
  else if (unit == "tib") scale = 1024.0 * 1024 * 1024 * 1024;
  else TPU_CHECK_VALUE(false, "unknown size unit '", unit, "' in '", text, "'");
  // 2^64 (exact as a double) and above do not fit: converting them is undefined (it gave 0).
  const double bytes = number * scale;
  TPU_CHECK_VALUE(bytes < 18446744073709551616.0, "size '", text, "' is out of range (at most 2^64 - 1 bytes)");
  return static_cast<uint64_t>(bytes);
}

}  // namespace torch_tpu::config
