// The program cache's persistent tier: the process-wide authenticated store (common/disk_cache.h,
// which describes layout, trust, entries and eviction) under <cache root>/<version>, where
// <version> names everything that changes what an entry means: the store's format, the program
// format, the torch version, the IR op count, kCompilerVersion and a fingerprint of the Python
// lowerings and the extension (computed by the package at import). An upgrade therefore starts a
// fresh directory and never reads stale entries.
#pragma once

#include <cstdint>
#include <string>

#include "common/disk_cache.h"

namespace torch_tpu::compiler {

// Bump when the C++ side of compilation changes what a key or a stored program means (the
// dispatcher's key layout, the lowering bridge's argument description, IR semantics). The
// lowering fingerprint covers rebuilt extensions in development; this covers releases.
inline constexpr uint32_t kCompilerVersion = 1;

// The versioned subdirectory name for a lowering fingerprint.
std::string cache_version(const std::string& lowering_fingerprint);

// The process-wide disk tier: null until configure_disk_cache() ran, or when it is disabled.
DiskCache* process_disk_cache();
// Statistics of the process-wide disk tier (enabled false when it is off or unconfigured).
DiskCacheStats process_disk_cache_stats();
// Opens the process-wide disk tier from the environment (TORCH_TPU_CACHE_DIR,
// TORCH_TPU_CACHE_MAX_BYTES). Called once by the Python package at import, which supplies a
// fingerprint of the lowering sources; later calls do nothing. Never throws for directory
// problems (those disable the tier); throws c10::ValueError for a malformed size.
void configure_disk_cache(const std::string& lowering_fingerprint);

}  // namespace torch_tpu::compiler
