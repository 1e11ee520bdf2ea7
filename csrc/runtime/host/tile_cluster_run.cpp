// Tile clusters (tile_cluster.h): running a cluster's tile program over its output, tile by
// tile, on kernel threads, or through its native kernel once one is loaded.
#include "runtime/host/tile_cluster.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>
#include <c10/util/Half.h>
#include <dlfcn.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <unordered_map>

#include "common/check.h"
#include "runtime/host/column_sums.h"
#include "runtime/host/kernel_threads.h"
#include "runtime/host/kernels.h"
#include "runtime/host/native_kernels.h"
#include "runtime/host/tile_access.h"
#include "runtime/host/tile_math.h"

namespace torch_tpu::runtime::host {

using namespace tile;
using ir::DType;
using ir::OpKind;

namespace {
// One per-tile instruction of a tile of n elements (rows of `row` elements): the interpreter's
// step, also called back by native kernels for the instructions they leave to it.
struct TileStep {
  const Cluster::Instr* program;
  float* const* slot_ptr;
  int64_t n, row;
  bool use_sleef;

  void operator()(int32_t k) const {
    const Cluster::Instr& in = program[k];
    auto slot = [p = slot_ptr](int16_t s) { return s < 0 ? nullptr : p[s]; };
    const int64_t n8 = (n + 7) / 8 * 8, rows = n / row, rows8 = (rows + 7) / 8 * 8;
    if (in.op >= kRowSum && in.op <= kRowMin) {
      exec_row(in.op, slot(in.dst), slot(in.a), n, row);
    } else if (in.expand) {  // a per-row value back over its rows
      const float* a = slot(in.a);
      float* d = slot(in.dst);
      for (int64_t r = 0; r < rows; ++r) std::fill_n(d + r * row, row, a[r]);
    } else if (in.rows) {
      exec_instr(in, slot, rows, rows8, use_sleef);
    } else {
      exec_instr(in, slot, n, n8, use_sleef);
    }
  }
  static void run(void* self, int32_t k) { (*static_cast<const TileStep*>(self))(k); }
};
}  // namespace

NativeTileFn Cluster::native_fn() const {
  if (NativeKernel* k = native_.kernel.load(std::memory_order_acquire)) return k->get();
  const NativeTierPolicy& policy = native_tier_policy();
  if (!policy.enabled || native_.runs.load(std::memory_order_relaxed) >= policy.hot_runs) return nullptr;
  // Exactly one run (the hot_runs-th) asks; the others interpret until the kernel is loaded.
  if (native_.runs.fetch_add(1, std::memory_order_relaxed) + 1 != policy.hot_runs) return nullptr;
  const std::string source = native_source(policy.lanes);
  NativeKernel* k = source.empty() ? nullptr : native_kernel(source);
  if (k == nullptr) return nullptr;
  native_.kernel.store(k, std::memory_order_release);
  return k->get();
}

void Cluster::run(std::vector<at::Tensor>& values, const std::vector<at::Tensor*>& outs) const {
  // Walk order: row-major over the shape, or channels-last's memory order (N, spatial..., C).
  const std::optional<at::MemoryFormat> walk = walk_format(values);
  c10::SmallVector<int64_t, 6> order;
  if (walk) {
    order.push_back(0);
    for (size_t d = 2; d < shape_.size(); ++d) order.push_back(static_cast<int64_t>(d));
    order.push_back(1);
  }
  c10::SmallVector<int64_t, 6> walk_shape(shape_.begin(), shape_.end());
  auto permuted = [&](c10::IntArrayRef v) {
    c10::SmallVector<int64_t, 6> p(v.begin(), v.end());
    for (size_t d = 0; d < order.size(); ++d) p[d] = v[static_cast<size_t>(order[d])];
    return p;
  };
  if (!order.empty()) walk_shape = permuted(shape_);
  std::vector<Access> in_acc;
  in_acc.reserve(inputs_.size());
  for (const Input& in : inputs_) {
    const at::Tensor& v = values[in.node];
    TPU_CHECK(v.defined(), "host fusion: operand %", in.node, " has no value");
    // A value may be smaller than its node's shape (a 0-d constant): read it expanded.
    at::Tensor t = v.sizes().equals(in.shape) ? v : v.expand(in.shape);
    // Per-row inputs walk the lead shape (one value per row); the others the cluster's shape.
    const size_t rank = in.compact ? static_cast<size_t>(lead_rank_) : shape_.size();
    c10::SmallVector<int64_t, 6> strides(rank, 0);
    if (in.broadcast) {
      for (size_t k = 0; k < in.dims.size(); ++k) {
        if (in.shape[k] != 1) strides[in.dims[k]] = t.stride(static_cast<int64_t>(k));
      }
    } else {
      strides.assign(t.strides().begin(), t.strides().end());
    }
    if (!order.empty() && !in.compact) strides = permuted(strides);
    in_acc.push_back(make_access(const_cast<void*>(t.const_data_ptr()), t.scalar_type(),
                                 c10::IntArrayRef(walk_shape).slice(0, rank), strides));
  }
  std::vector<Access> out_acc;
  out_acc.reserve(stores_.size());
  for (size_t j = 0; j < stores_.size(); ++j) {
    const Store& s = stores_[j];
    // In a permuted walk, full-size values are stored in its memory order (0-d ones as they are).
    const bool walked = !order.empty() && s.shape.size() == shape_.size();
    at::Tensor dest = outs[j] != nullptr ? *outs[j]
                                         : at::empty(s.shape, at::TensorOptions().dtype(s.dtype).memory_format(
                                                                  walked ? *walk : at::MemoryFormat::Contiguous));
    values[s.node] = dest;
    // Reduced values are written once per row: their access walks the lead shape.
    void* base = dest.numel() ? dest.data_ptr() : nullptr;
    out_acc.push_back(walked ? make_access(base, s.dtype, walk_shape, permuted(dest.strides()))
                             : make_access(base, s.dtype, s.shape, dest.strides()));
  }
  if (numel_ == 0) return;
  // Stores into contiguous float32 memory that no input reads are computed in place: the
  // storing instruction's buffer is the destination itself (except in a last partial tile,
  // whose rounded-up lanes would run past it), which saves the copy out of the tile.
  auto byte_span = [](const Access& a) {
    return byte_extent(a.base, a.sizes, a.strides, static_cast<int64_t>(c10::elementSize(a.dtype)));
  };
  c10::SmallVector<uint8_t, 16> store_in_place(stores_.size(), 0);
  for (size_t j = 0; j < stores_.size(); ++j) {
    const Access& o = out_acc[j];
    if (lead_rank_ >= 0 || !stores_[j].per_tile || o.dtype != at::kFloat || !o.contiguous() || o.base == nullptr) {
      continue;
    }
    const auto [lo, hi] = byte_span(o);
    store_in_place[j] = std::none_of(in_acc.begin(), in_acc.end(), [&, lo = lo, hi = hi](const Access& a) {
      const auto [alo, ahi] = byte_span(a);
      return alo <= hi && lo <= ahi;
    });
  }
  const int64_t tile = tile_, num_tiles = (numel_ + tile - 1) / tile, stride = slot_stride_, row = row_;
  // How each input reaches its slot: filled once (one value for every tile), read where it lies
  // (contiguous float32: no instruction writes an input's slot, build() never reuses one), or
  // loaded per tile. On the stack for clusters of up to 16 inputs: no allocation per run.
  // Also loaded once: an input broadcast along its leading dims whose remaining extent divides
  // the tile (a row cluster's weight over its rows; a bias of 64 in tiles of 1024), since every
  // tile starts at a multiple of it and so holds the same values. One value per tile: an input
  // broadcast along its innermost dims over a multiple of the tile (a per-channel mean over
  // 64x64 images in tiles of 1024) holds one value in each tile, filled only when it changes.
  enum InputMode : uint8_t { kLoadPerTile, kUniform, kInPlace, kSameEveryTile, kOneValuePerTile };
  c10::SmallVector<uint8_t, 16> mode(inputs_.size(), kLoadPerTile);
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const Access& a = in_acc[i];
    if (inputs_[i].one_element || a.uniform()) {
      mode[i] = kUniform;
    } else if (a.dtype == at::kFloat && a.contiguous() && !inputs_[i].compact) {
      mode[i] = kInPlace;
    } else if (!inputs_[i].compact && a.sizes.size() >= 2 && a.strides[0] == 0 && tile_ % (numel_ / a.sizes[0]) == 0) {
      mode[i] = kSameEveryTile;
    } else if (!inputs_[i].compact && a.strides.back() == 0 && a.sizes.back() % tile_ == 0) {
      mode[i] = kOneValuePerTile;
    }
  }

  const bool use_sleef = sleef_available();
  const NativeTileFn native = native_fn();
  // A column sum adds its rows per tile when the walk visits the member as [rows, kept]: kept
  // dims trailing in a row-major walk, the channels in a channels-last one. Otherwise its
  // member goes to a scratch tensor in walk order, summed after the tiles.
  const int64_t columns = column_count_;
  const bool columns_in_tiles = column_sum_ >= 0 && (walk ? column_kept_ == std::make_pair(1, 2)
                                                          : column_kept_.second == static_cast<int>(shape_.size()));
  // A member the cluster stores anyway is summed from its destination after the tiles.
  at::Tensor column_scratch;
  Access column_scratch_acc;
  if (column_sum_ >= 0 && !columns_in_tiles && !column_operand_stored_) {
    column_scratch = at::empty(
        shape_, at::TensorOptions().dtype(at::kFloat).memory_format(walk ? *walk : at::MemoryFormat::Contiguous));
    column_scratch_acc =
        walk ? make_access(column_scratch.data_ptr(), at::kFloat, walk_shape, permuted(column_scratch.strides()))
             : make_access(column_scratch.data_ptr(), at::kFloat, shape_, column_scratch.strides());
  }
  // A total sum: one sum per block of kSumBlock elements; a column sum: one per column per
  // block of kColumnBlock rows. Each block's tiles run on one thread.
  const int64_t block = total_sum_ >= 0 ? kSumBlock : columns_in_tiles ? kColumnBlock * columns : tile;
  const int64_t tiles_per_block = block / tile, num_blocks = (numel_ + block - 1) / block;
  std::vector<float> block_sums(total_sum_ >= 0    ? static_cast<size_t>(num_blocks)
                                : columns_in_tiles ? static_cast<size_t>(num_blocks * columns)
                                                   : 0);
  auto run_tiles = [&](int64_t t0, int64_t t1) {
    LaneSums lanes;
    thread_local ColumnLanes column_lanes;
    // Per-thread scratch, reused across runs: a fresh vector per run cost a malloc (often
    // above glibc's fastbin sizes, so it consolidated the heap) plus a zero fill.
    thread_local std::vector<float> scratch;
    const size_t need = static_cast<size_t>(num_slots_) * stride;
    if (scratch.size() < need) scratch.assign(need, 0.f);
    float* buf = scratch.data();
    thread_local std::vector<float*> slot_ptrs;  // where each slot's values are this tile
    slot_ptrs.resize(static_cast<size_t>(num_slots_));
    // Through a plain pointer from here: each use of a thread_local of a shared library is a
    // __tls_get_addr call (8% of a row cluster's time when slot() read it per instruction).
    float** const slot_ptr = slot_ptrs.data();
    for (int16_t s = 0; s < num_slots_; ++s) slot_ptr[s] = buf + s * stride;
    auto slot = [slot_ptr](int16_t s) { return s < 0 ? nullptr : slot_ptr[s]; };
    // Splats and uniform inputs are the same for every tile: filled once.
    for (auto [s, v] : splats_) std::fill_n(slot(s), tile, v);
    for (size_t i = 0; i < inputs_.size(); ++i) {
      if (mode[i] == kSameEveryTile) load(in_acc[i], 0, std::min(tile, numel_), slot(inputs_[i].slot));
      if (mode[i] != kUniform) continue;
      float v;
      load(in_acc[i], 0, 1, &v);
      std::fill_n(slot(inputs_[i].slot), tile, v);
    }
    const int64_t tile8 = (tile + 7) / 8 * 8;
    // Every lane of an invariant buffer holds the same value (it reads only such buffers), so
    // one group is computed and copied across the tile: an optimizer's recomputed bias
    // corrections (executor.h) took SLEEF's pow over whole tiles, 8% of a compiled AdamW step.
    const int64_t group = std::min<int64_t>(tile8, 16);
    for (const Instr& in : program_) {
      if (!in.invariant) continue;
      exec_instr(in, slot, group, group, use_sleef);
      float* d = slot(in.dst);
      std::fill(d + group, d + tile8, d[0]);
    }
    // kOneValuePerTile: the value each input's slot was filled with in this call (its bits;
    // slots of inputs are written by nothing else), and for how many lanes.
    c10::SmallVector<std::pair<uint32_t, int64_t>, 16> filled(inputs_.size(), {0, 0});
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t start = t * tile, n = std::min(tile, numel_ - start), n8 = (n + 7) / 8 * 8;
      for (size_t i = 0; i < inputs_.size(); ++i) {
        if (mode[i] == kUniform || mode[i] == kSameEveryTile) continue;
        const int16_t s = inputs_[i].slot;
        if (mode[i] == kOneValuePerTile) {
          float v;
          load(in_acc[i], start, 1, &v);
          const uint32_t bits = std::bit_cast<uint32_t>(v);
          slot_ptr[s] = buf + s * stride;
          if (filled[i].second < n || filled[i].first != bits) {
            std::fill_n(slot_ptr[s], n, v);
            filled[i] = {bits, n};
          }
          continue;
        }
        // In place only while the 8-lane rounding reads inside the operand (not the last tile).
        if (mode[i] == kInPlace && start + n8 <= numel_) {
          slot_ptr[s] = reinterpret_cast<float*>(in_acc[i].base) + start;
          continue;
        }
        slot_ptr[s] = buf + s * stride;
        if (inputs_[i].compact) {
          load(in_acc[i], start / row, n / row, slot_ptr[s]);
        } else {
          load(in_acc[i], start, n, slot_ptr[s]);
        }
      }
      const int64_t rows = n / row;
      const bool whole = start + n8 <= numel_;
      for (size_t j = 0; j < stores_.size(); ++j) {
        if (!store_in_place[j]) continue;
        const int16_t s = stores_[j].slot;
        slot_ptr[s] = whole ? reinterpret_cast<float*>(out_acc[j].base) + start : buf + s * stride;
      }
      // Lanes past n hold stale data from earlier tiles or runs (or zeros): computed, never stored.
      TileStep tile_step{program_.data(), slot_ptr, n, row, use_sleef};
      if (native != nullptr) {
        native(slot_ptr, n8, &TileStep::run, &tile_step);
      } else {
        for (size_t k = 0; k < program_.size(); ++k) {
          if (!program_[k].invariant) tile_step(static_cast<int32_t>(k));
        }
      }
      if (total_slot_ >= 0) {
        lane_sums_add_tile(lanes, slot(total_slot_), n);
        if ((start + n) % kSumBlock == 0 || start + n == numel_) {
          block_sums[static_cast<size_t>(start / kSumBlock)] = lane_sums_finish(lanes);
          lanes = LaneSums();
        }
      }
      if (columns_in_tiles) {
        if (start % block == 0) column_lanes.reset(columns);
        column_lanes.add(start % block, slot(column_slot_), n);
        if ((start + n) % block == 0 || start + n == numel_)
          column_lanes.finish(&block_sums[(start / block) * columns]);
      } else if (column_scratch.defined()) {
        store(column_scratch_acc, start, n, slot(column_slot_));
      }
      for (size_t j = 0; j < stores_.size(); ++j) {
        // Already there, or written after the tiles.
        if ((store_in_place[j] && whole) || stores_[j].total || stores_[j].column) continue;
        if (!stores_[j].reduced) {
          store(out_acc[j], start, n, slot(stores_[j].slot));
          continue;
        }
        const float* v = slot(stores_[j].slot);
        if (stores_[j].shape.empty()) {  // one value for the whole cluster: the first tile writes it
          if (start == 0) store(out_acc[j], 0, 1, v);
          continue;
        }
        // Per-row values are compact (an invariant one holds the same value everywhere).
        store(out_acc[j], start / row, rows, v);
      }
    }
  };
  // A stream worker runs ATen with one thread, so at::parallel_for is serial there: a cluster
  // with enough work (elements x instructions, compared like an elementwise kernel's elements)
  // splits its tiles across the kernel threads instead (kernel_threads.h).
  // A sum's blocks never straddle two threads: its tiles are handed out in whole blocks.
  const int64_t units = (num_tiles + tiles_per_block - 1) / tiles_per_block;
  auto run_units = [&](int64_t u0, int64_t u1) {
    run_tiles(u0 * tiles_per_block, std::min(num_tiles, u1 * tiles_per_block));
  };
  parallel_units(split_work(), units, tile * tiles_per_block, run_units);
  for (size_t j = 0; j < stores_.size(); ++j) {
    if (stores_[j].total) {
      const float sum = total_sum(block_sums.data(), static_cast<int64_t>(block_sums.size()));
      store(out_acc[j], 0, 1, &sum);
    } else if (stores_[j].column) {
      std::vector<float> sums(static_cast<size_t>(columns));
      if (columns_in_tiles) {
        combine_column_blocks(block_sums.data(), num_blocks, columns, sums.data());
      } else {
        column_sums(column_scratch.defined() ? column_scratch : values[column_operand_], column_kept_.first,
                    column_kept_.second, sums.data());
      }
      store(out_acc[j], 0, columns, sums.data());
    }
  }
}

std::string Cluster::describe() const {
  std::string s = "cluster shape " + c10::str(c10::IntArrayRef(shape_)) + " " + c10::toString(dtype_) + ", tile " +
                  std::to_string(tile_) + (lead_rank_ >= 0 ? " (rows of " + std::to_string(row_) + ")" : "") + ", " +
                  std::to_string(num_slots_) + " buffers:";
  for (const std::string& m : member_names_) s += " " + m + ",";
  s.pop_back();
  s += "; inputs";
  for (const Input& in : inputs_) s += " %" + std::to_string(in.node) + (in.broadcast ? "(broadcast)" : "");
  if (!splats_.empty()) s += " + " + std::to_string(splats_.size()) + " constants";
  s += "; stores";
  for (int32_t m : store_nodes_) s += " %" + std::to_string(m);
  return s;
}

}  // namespace torch_tpu::runtime::host