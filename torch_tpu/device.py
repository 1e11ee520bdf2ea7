"""``torch.tpu``: the device module, shaped like ``torch.cuda``.

Devices, streams and events use PyTorch's generic ``torch.Stream``/``torch.Event`` on top of
our DeviceGuard implementation; memory statistics come from the caching device allocator;
random state is the per-device Philox generator (seed, offset).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch

from . import _C

_DeviceLike = int | str | torch.device | None


def _index(device: _DeviceLike = None, optional: bool = True) -> int:
    if device is None:
        return _C._current_device()
    if isinstance(device, int):
        idx = device
    else:
        d = torch.device(device)
        if d.type != "tpu":
            raise ValueError(f"Expected a tpu device, but got: {d}")
        idx = d.index if d.index is not None else _C._current_device()
    _C._check_device(idx)
    return idx


# -- devices ----------------------------------------------------------------------------------

def is_available() -> bool:
    return _C._device_count() > 0


def is_initialized() -> bool:
    """Whether this process has used a tpu device yet, as ``torch.cuda.is_initialized()``:
    False after import, True from the first tensor allocated on a device, ``set_device``,
    ``current_device``, ``synchronize`` or ``init``. DeviceMesh sets each rank's device from
    ``LOCAL_RANK`` only while this is False."""
    return _C._is_initialized()


def init() -> None:
    """Marks the devices as in use (they are ready at import; nothing else to set up)."""
    _C._mark_initialized()


def _lazy_init() -> None:
    # PyTorch calls torch.<device>._lazy_init() once, at the first Python-level use of the device
    # (a tensor factory with device="tpu", torch.accelerator.set_device_index, ...), as it does
    # torch.cuda's.
    _C._mark_initialized()


def __getattr__(name: str) -> Any:
    # ``torch.tpu._initialized`` follows is_initialized(): torch.utils.checkpoint reads it (as it
    # reads torch.cuda's) to decide whether to stash the device RNG state around a recomputed
    # forward.
    if name == "_initialized":
        return _C._is_initialized()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_in_bad_fork() -> bool:
    """True in a process forked after the parent started the device's threads: the device is
    unusable there (use the 'spawn' start method), as torch.cuda's is after a fork."""
    return _C._in_bad_fork()


def device_count() -> int:
    return _C._device_count()


def current_device() -> int:
    _C._mark_initialized()
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    _C._set_device(_index(device))


def get_device_name(device: _DeviceLike = None) -> str:
    return _C._device_name(_index(device))


@dataclass(frozen=True)
class DeviceProperties:
    name: str
    total_memory: int
    index: int
    type: str = "tpu"


def get_device_properties(device: _DeviceLike = None) -> DeviceProperties:
    i = _index(device)
    return DeviceProperties(name=_C._device_name(i), total_memory=_C._device_capacity(i), index=i)


def get_device_capability(device: _DeviceLike = None) -> tuple[int, int]:
    return (1, 0)


def is_bf16_supported(including_emulation: bool = True) -> bool:
    return True


def get_amp_supported_dtype() -> list[torch.dtype]:
    """dtypes torch.autocast("tpu") accepts."""
    return [torch.bfloat16, torch.float16]


def synchronize(device: _DeviceLike = None) -> None:
    """Wait for every stream of the device."""
    _C._mark_initialized()
    _C._synchronize(_index(device))


class device:
    """Context manager that changes the current device: ``with torch.tpu.device(1): ...``."""

    def __init__(self, device: _DeviceLike):
        self.idx = _index(device) if device is not None and device != -1 else -1
        self.prev = -1

    def __enter__(self) -> "device":
        if self.idx != -1:
            self.prev = _C._current_device()
            _C._set_device(self.idx)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.idx != -1:
            _C._set_device(self.prev)


class device_of(device):
    """Context manager selecting the device of a tensor (no-op for non-tpu tensors)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.device.type == "tpu" else -1)


# -- streams and events -----------------------------------------------------------------------

class Stream(torch.Stream):
    """An in-order work queue of a tpu device (one worker each; see csrc/device/stream.h)."""

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if "stream_id" in kwargs:
            return super().__new__(cls, **kwargs)
        # A pool stream of the given (default: current) device. The index is explicit: a bare
        # "tpu" would reach the guard as index -1.
        base = torch.Stream(device=torch.device("tpu", _index(device)), priority=priority)
        return super().__new__(cls, stream_id=base.stream_id, device_index=base.device_index,
                               device_type=base.device_type)

    def wait_event(self, event: torch.Event) -> None:
        event.wait(self)

    def wait_stream(self, stream: torch.Stream) -> None:
        self.wait_event(stream.record_event())

    def record_event(self, event: torch.Event | None = None) -> torch.Event:
        event = event if event is not None else Event()
        event.record(self)
        return event


class _EventMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == "tpu"


class Event(metaclass=_EventMeta):
    """A position in a stream's queue (record, wait, query, synchronize, elapsed_time).

    ``torch.tpu.Event(...)`` returns a plain ``torch.Event`` of the tpu device: PyTorch's
    ``Event.elapsed_time`` rejects subclasses of ``torch.Event``. ``isinstance(e, torch.tpu.Event)``
    holds for every tpu event. record()/wait() without a stream use the current stream.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
        return torch.Event(device="tpu", enable_timing=enable_timing, blocking=blocking, interprocess=interprocess)


_PRIVATEUSE1 = 20  # c10::DeviceType::PrivateUse1, the device type torch.Stream stores


def _wrap(pair: tuple[int, int]) -> Stream:
    sid, idx = pair
    return Stream(stream_id=sid, device_index=idx, device_type=_PRIVATEUSE1)


def current_stream(device: _DeviceLike = None) -> Stream:
    return _wrap(_C._current_stream(_index(device)))


def default_stream(device: _DeviceLike = None) -> Stream:
    return _wrap(_C._default_stream(_index(device)))


def set_stream(stream: torch.Stream) -> None:
    if stream is None:
        return
    _C._set_stream(stream.stream_id, stream.device_index)


@contextlib.contextmanager
def stream(s: torch.Stream | None) -> Iterator[None]:
    """Make s the current stream of its device (and the current device) inside the block."""
    if s is None:
        yield
        return
    prev_device = _C._current_device()
    prev = _C._current_stream(s.device_index)
    _C._set_device(s.device_index)
    _C._set_stream(s.stream_id, s.device_index)
    try:
        yield
    finally:
        _C._set_stream(prev[0], prev[1])
        _C._set_device(prev_device)


class StreamContext:
    """Class form of :func:`stream` (torch.cuda.StreamContext parity)."""

    def __init__(self, s: torch.Stream | None):
        self._cm = stream(s)

    def __enter__(self) -> None:
        self._cm.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._cm.__exit__(*exc)


# -- memory -----------------------------------------------------------------------------------

def _plugin_memory_stats(index: int) -> dict[str, int]:
    """The PJRT plugin's own allocator figures for device `index` ({} where it keeps none)."""
    try:
        return dict(_C._pjrt_memory_stats(index))
    except NotImplementedError:  # e.g. XLA's CPU plugin keeps no allocator statistics
        return {}


def memory_stats(device: _DeviceLike = None) -> dict[str, int]:
    """The caching allocator's figures (keys as torch.cuda.memory_stats). On the PJRT runtime also
    `pjrt.resident_bytes` / `pjrt.resident_entries` (tensor bytes held in device buffers, all
    devices), `pjrt.device_bytes` / `pjrt.peak_device_bytes` (every PJRT buffer of this process on
    this device: what memory_allocated() reports there) and the plugin's own `pjrt.<figure>` statistics of this device where it reports them."""
    i = _index(device)
    stats = dict(_C._memory_stats(i))
    info = _C._pjrt_info()
    if info is not None:
        stats["pjrt.resident_bytes"] = info["resident"]["bytes"]
        stats["pjrt.resident_entries"] = info["resident"]["entries"]
        stats["pjrt.device_bytes"], stats["pjrt.peak_device_bytes"] = _C._pjrt_device_bytes(i)
        plugin = _plugin_memory_stats(i)
        stats.update({f"pjrt.{k}": v for k, v in plugin.items() if v >= 0})
    return dict(sorted(stats.items()))


def memory_allocated(device: _DeviceLike = None) -> int:
    """Bytes of tensor memory in use on the device. On the PJRT runtime: the bytes of the device
    buffers this process holds there (the plugin's on-device sizes), not the host allocator's."""
    i = _index(device)
    on_device = _C._pjrt_device_bytes(i)
    if on_device is not None:
        return on_device[0]
    return _C._memory_stats(i)["allocated_bytes.all.current"]


def max_memory_allocated(device: _DeviceLike = None) -> int:
    """Peak of memory_allocated() since the start or reset_peak_memory_stats()."""
    i = _index(device)
    on_device = _C._pjrt_device_bytes(i)
    if on_device is not None:
        return on_device[1]
    return _C._memory_stats(i)["allocated_bytes.all.peak"]


def memory_reserved(device: _DeviceLike = None) -> int:
    return _C._memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device: _DeviceLike = None) -> int:
    return _C._memory_stats(_index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    i = _index(device)
    _C._reset_peak_memory_stats(i)
    _C._pjrt_reset_peak_device_bytes(i)


def reset_max_memory_allocated(device: _DeviceLike = None) -> None:
    reset_peak_memory_stats(device)


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    _C._reset_accumulated_memory_stats(_index(device))


def set_per_process_memory_fraction(fraction: float, device: _DeviceLike = None) -> None:
    """Limit this process's device memory (reserved bytes, cache included) to `fraction` of the
    device's capacity; beyond it an allocation raises torch.OutOfMemoryError, as on CUDA."""
    _C._set_memory_fraction(float(fraction), _index(device))


def get_per_process_memory_fraction(device: _DeviceLike = None) -> float:
    return _C._memory_fraction(_index(device))


def memory_stats_as_nested_dict(device: _DeviceLike = None) -> dict:
    """memory_stats() with its dotted keys as nested dicts, as torch.cuda's."""
    out: dict = {}
    for key, value in memory_stats(device).items():
        node = out
        *path, leaf = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def set_sync_debug_mode(debug_mode: int | str) -> None:
    """Warn (1, "warn") or raise (2, "error") at every operation that makes the host wait for
    device values (.item(), .cpu(), printing, data-dependent shapes); 0 / "default" turns it
    off. As torch.cuda.set_sync_debug_mode."""
    if isinstance(debug_mode, str):
        modes = {"default": 0, "warn": 1, "error": 2}
        if debug_mode not in modes:
            raise RuntimeError("invalid value of debug_mode, expected one of `default`, `warn`, `error`")
        debug_mode = modes[debug_mode]
    _C._set_sync_debug_mode(int(debug_mode))


def get_sync_debug_mode() -> int:
    return _C._sync_debug_mode()


def is_current_stream_capturing() -> bool:
    """Always False: tpu streams have no graph capture (torch.cuda parity for libraries that ask)."""
    return False


OutOfMemoryError = torch.OutOfMemoryError
# Deprecated torch.cuda names, kept there too.
memory_cached = memory_reserved
max_memory_cached = max_memory_reserved
reset_max_memory_cached = reset_peak_memory_stats


def empty_cache() -> None:
    """Return cached, unused device memory (of every device) to the system."""
    for i in range(device_count()):
        _C._empty_cache(i)


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """(free, total) bytes of the device; free excludes memory held by the cache. On the PJRT
    runtime: the plugin's limit and bytes in use where it reports them, else the capacity less
    the bytes of this process's device buffers."""
    i = _index(device)
    on_device = _C._pjrt_device_bytes(i)
    if on_device is not None:
        plugin = _plugin_memory_stats(i)
        if plugin.get("bytes_limit", -1) >= 0 and plugin.get("bytes_in_use", -1) >= 0:
            return plugin["bytes_limit"] - plugin["bytes_in_use"], plugin["bytes_limit"]
        total = _C._device_capacity(i)
        return max(total - on_device[0], 0), total
    total = _C._device_capacity(i)
    return total - _C._memory_stats(i)["reserved_bytes.all.current"], total


# torch.tpu.memory: the allocator history and snapshot (torch.cuda.memory's _record_memory_history,
# _snapshot, _dump_snapshot); other names resolve to this module's (memory_allocated, ...).
from .diagnose import profiler_memory as memory  # noqa: E402


def _format_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return ""  # unreachable


def memory_summary(device: _DeviceLike = None, abbreviated: bool = False) -> str:
    """A table of the caching allocator's figures for a device, laid out like
    torch.cuda.memory_summary (current and peak usage, allocation counts, retries and OOMs).
    `abbreviated` is accepted for parity; the table is always the short one."""
    i = _index(device)
    st = memory_stats(i)
    width = 75
    rule, double = "|" + "-" * width + "|", "|" + "=" * width + "|"

    def row(*cells: str) -> str:
        return "| " + f"{cells[0]:<26}" + "".join(f"| {c:>13} " for c in cells[1:]) + "|"

    lines = [double, "|" + f"torch_tpu memory summary, device ID {i} ({get_device_name(i)})".center(width)[:width] + "|",
             rule, row("Metric", "Cur Usage", "Peak Usage", "Capacity"), rule]
    capacity = _C._device_capacity(i)
    for label, key in (("Allocated memory", "allocated_bytes"), ("Requested memory", "requested_bytes"),
                       ("Reserved memory", "reserved_bytes")):
        lines.append(row(label, _format_bytes(st[f"{key}.all.current"]), _format_bytes(st[f"{key}.all.peak"]),
                         _format_bytes(capacity)))
    lines += [rule, row("Metric", "Current", "Tot Alloc", "Tot Freed"), rule,
              row("Allocations", str(st["active.all.current"]), str(st["allocation.all.allocated"]),
                  str(st["allocation.all.freed"])),
              row("Cached blocks", str(st["inactive_split.all.current"]), "", ""),
              rule,
              row("Cache hits", str(st["num_cache_hits"]), "", ""),
              row("Alloc retries", str(st["num_alloc_retries"]), "", ""),
              row("OOMs", str(st["num_ooms"]), "", ""),
              double]
    return "\n".join(lines)


# -- random numbers ---------------------------------------------------------------------------

# One default generator per device, as a tuple like torch.cuda.default_generators (the device
# count is fixed for the process).
default_generators: tuple[torch.Generator, ...] = tuple(_C._default_generator(i) for i in range(_C._device_count()))


def _generator(device: _DeviceLike = None) -> torch.Generator:
    return _C._default_generator(_index(device))


def manual_seed(seed: int) -> None:
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for i in range(device_count()):
        _C._default_generator(i).manual_seed(int(seed))


def seed() -> None:
    _generator().seed()


def seed_all() -> None:
    s = _generator(0).seed()
    for i in range(1, device_count()):
        _C._default_generator(i).manual_seed(s)


def initial_seed() -> int:
    return _generator().initial_seed()


def get_rng_state(device: _DeviceLike = "tpu") -> torch.Tensor:
    """16 bytes: seed then Philox offset (little-endian uint64)."""
    return _generator(device).get_state()


def set_rng_state(new_state: torch.Tensor, device: _DeviceLike = "tpu") -> None:
    _generator(device).set_state(new_state.clone().to("cpu"))


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    for i, s in enumerate(new_states):
        set_rng_state(s, i)
