"""`python -m torch_tpu profile`, torch_tpu.diagnose.report(), the Chrome-trace device events and
torch.tpu.memory._snapshot() (docs/diagnostics.md, "profile")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch_tpu
from torch.cuda import _memory_viz
from torch.profiler import ProfilerActivity
from torch_tpu import _C
from torch_tpu.diagnose import profiler_trace
from torch_tpu.diagnose.report import start, stop

REPO = Path(__file__).resolve().parents[2]

# A training-like script with one planted problem of each kind, each marked by a comment. It
# checks its own results against the CPU and prints RESULT ok.
PLANTED = textwrap.dedent('''
    import torch
    import torch_tpu

    lib = torch.library.Library("profile_plant", "DEF")
    lib.define("triple(Tensor x) -> Tensor")
    lib.impl("triple", lambda x: x * 3, "CPU")


    def step(w, x):
        return (x @ w).relu().sum()


    @torch.compile(backend="tpu")
    def scaled(x):
        return x * 2 + 1


    @torch.compile(backend="tpu")
    def noisy(x):
        y = x.sin()
        print("inside a compiled function")  # PLANT graph-break
        return y * 3


    torch.manual_seed(0)
    w_cpu = torch.randn(8, 8)
    w = w_cpu.to("tpu")
    total, expected = 0.0, 0.0
    for i in range(5):
        x_cpu = torch.randn(4, 8)
        loss = step(w, x_cpu.to("tpu"))
        total += loss.item()  # PLANT item
        expected += step(w_cpu, x_cpu).item()
    a_cpu, b_cpu = torch.randn(4), torch.randn(6)
    a = scaled(a_cpu.to("tpu"))
    b = scaled(b_cpu.to("tpu"))  # PLANT recompile
    c = torch.ops.profile_plant.triple(torch.arange(3.0).to("tpu"))  # PLANT fallback
    n = noisy(a_cpu.to("tpu"))
    torch.testing.assert_close(torch.tensor(total), torch.tensor(expected), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(a.cpu(), a_cpu * 2 + 1)
    torch.testing.assert_close(b.cpu(), b_cpu * 2 + 1)
    torch.testing.assert_close(c.cpu(), torch.tensor([0.0, 3.0, 6.0]))
    torch.testing.assert_close(n.cpu(), a_cpu.sin() * 3)
    print("RESULT ok")
''')


def _line_of(marker: str) -> int:
    for i, line in enumerate(PLANTED.splitlines(), 1):
        if f"# PLANT {marker}" in line:
            return i
    raise AssertionError(marker)


def _run_profile(tmp_path: Path, mode: str,
                 extra: tuple[str, ...] = ()) -> tuple[subprocess.CompletedProcess, dict, str]:
    script = tmp_path / "planted.py"
    script.write_text(PLANTED)
    out = tmp_path / "report.json"
    env = {**os.environ, "TORCH_TPU_MODE": mode, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "torch_tpu", "profile", "--fallback", "cpu", "--json", str(out),
                           *extra, "--", "python", str(script)], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "RESULT ok" in proc.stdout
    return proc, json.loads(out.read_text()), str(script)


def _finding(report: dict, kind: str, where: str) -> dict:
    found = [f for f in report["findings"] if f["kind"] == kind and f["where"] == where]
    assert found, (kind, where, [(f["kind"], f["where"], f["title"]) for f in report["findings"]])
    return found[0]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_profile_finds_each_planted_problem_at_its_line(tmp_path: Path, mode: str) -> None:
    proc, report, script = _run_profile(tmp_path, mode)
    item = _finding(report, "host-sync", f"{script}:{_line_of('item')}")
    assert item["count"] == 5 and "_local_scalar_dense" in item["op"]
    assert f"move `.item()` out of the loop at {script}:{_line_of('item')}" in item["suggestion"]

    rec = _finding(report, "recompile", f"{script}:{_line_of('recompile')}")
    assert "size mismatch at index 0" in rec["reason"] and "expected 4, actual 6" in rec["reason"]
    assert "mark dim 0 dynamic" in rec["suggestion"]

    fb = _finding(report, "cpu-fallback", f"{script}:{_line_of('fallback')}")
    assert fb["op"] == "profile_plant::triple" and fb["count"] == 1
    assert "profile_plant::triple" in fb["suggestion"]

    gb = _finding(report, "graph-break", f"{script}:{_line_of('graph-break')}")
    assert "print" in gb["reason"] and "remove the print" in gb["suggestion"]

    s = report["summary"]
    assert s["host_syncs"] >= 5 and s["recompiles"] >= 1 and s["graph_breaks"] >= 1 and s["cpu_fallbacks"] == 1
    assert s["mode"] == mode and s["programs_run"] > 0 and 0 <= s["device_idle_fraction"] <= 1
    assert s["device_busy_s"] + s["device_idle_s"] == pytest.approx(s["wall_s"], rel=1e-6)
    # The text report names the same places and says what to do.
    for marker in ("item", "recompile", "fallback", "graph-break"):
        assert f"{script}:{_line_of(marker)}" in proc.stdout
    assert "->" in proc.stdout and "findings, most costly first" in proc.stdout


def test_profile_usage_errors() -> None:
    from torch_tpu.tools import profile

    with pytest.raises(SystemExit):
        profile.main(["--json"])
    with pytest.raises(SystemExit, match="no such script"):
        profile.main(["--", "python", "/nonexistent/script.py"])


def test_recording_is_off_by_default_and_after_a_session() -> None:
    assert not _C._profiler_enabled() and not _C._memory_history_recording()
    with torch_tpu.diagnose.profiling(memory_history=False):
        assert _C._profiler_enabled() and not _C._memory_history_recording()
        out = (torch.ones(3).to("tpu") + 1).cpu()
    torch.testing.assert_close(out, torch.full((3,), 2.0))
    result = torch_tpu.diagnose.report(file=None)  # the last session's
    assert result["device_events"] >= 1 and result["summary"]["host_syncs"] == 1
    assert not _C._profiler_enabled()
    (torch.ones(3).to("tpu") + 1).cpu()
    torch_tpu.sync()
    assert _C._profiler_take_device_events() == []


def test_chrome_trace_has_tpu_programs_aligned_with_aten_events(tmp_path: Path) -> None:
    torch.manual_seed(0)
    a, b = torch.randn(64, 32), torch.randn(32, 16)
    with profiler_trace.profile(activities=[ProfilerActivity.CPU]) as prof:
        out = (a.to("tpu") @ b.to("tpu")).cpu()
    torch.testing.assert_close(out, a @ b)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    device = [e for e in events if e.get("cat") == "tpu_program"]
    mm = [e for e in device if e["name"].startswith("aten::mm")]
    assert len(mm) == 1, [e["name"] for e in device]
    assert mm[0]["args"]["bytes moved"] == (64 * 32 + 32 * 16 + 64 * 16) * 4
    assert mm[0]["args"]["ops"].startswith("aten::mm")
    assert any(e.get("ph") == "M" and e["args"].get("name") == "tpu:0" for e in events)
    host_mm = [e for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::mm"]
    assert host_mm
    # The program starts after the host's aten::mm started (same Unix-epoch clock). Kineto
    # converts its approximate clock to epoch time, so allow 100 us of conversion error.
    assert mm[0]["ts"] >= host_mm[0]["ts"] - 100
    host_span = [e for e in events if e.get("cat") == "cpu_op"]
    assert mm[0]["ts"] <= max(e["ts"] + e["dur"] for e in host_span) + 100


def test_memory_snapshot_reads_in_memory_viz() -> None:
    torch.tpu.memory._record_memory_history(max_entries=1000)
    try:
        x = torch.empty(1000, 1000, device="tpu"); line = sys._getframe().f_lineno  # noqa: E702
        snap = torch.tpu.memory._snapshot()
        ptr = x.data_ptr()
        del x
        after = torch.tpu.memory._snapshot()
    finally:
        torch.tpu.memory._record_memory_history(enabled=None)
    blocks = [blk for seg in snap["segments"] for blk in seg["blocks"] if blk["address"] == ptr]
    assert len(blocks) == 1 and blocks[0]["state"] == "active_allocated"
    assert blocks[0]["requested_size"] == 4_000_000 and blocks[0]["size"] >= 4_000_000
    assert {"filename": __file__, "line": line, "name": "test_memory_snapshot_reads_in_memory_viz"} in \
        blocks[0]["frames"]
    actions = [(e["action"], e["addr"]) for e in after["device_traces"][0]]
    assert ("alloc", ptr) in actions and ("free_completed", ptr) in actions
    freed = [blk for seg in after["segments"] for blk in seg["blocks"] if blk["address"] == ptr]
    assert freed and freed[0]["state"] == "inactive"  # back in the cache
    assert "segments:" in _memory_viz.segsum(snap)
    assert "alloc" in _memory_viz.trace(after) or "free" in _memory_viz.trace(after)
    assert torch.tpu.memory.memory_allocated() == torch.tpu.memory_allocated()


def test_report_names_the_largest_memory_user_at_the_peak() -> None:
    start()
    big = torch.empty(1000, 1000, device="tpu"); line = sys._getframe().f_lineno  # noqa: E702
    small = torch.ones(10, device="tpu")
    del big
    data = stop()
    # torch_tpu.diagnose.report is both the function and (once imported) the callable module.
    result = torch_tpu.diagnose.report(data, file=None)
    mem = [f for f in result["findings"] if f["kind"] == "memory"]
    assert mem and mem[0]["where"] == f"{__file__}:{line}", mem
    assert mem[0]["bytes"] >= 4_000_000 and mem[0]["count"] == 1
    torch.testing.assert_close(small.cpu(), torch.ones(10))


def test_profile_writes_trace_and_memory_snapshot(tmp_path: Path) -> None:
    trace, snap = tmp_path / "trace.json", tmp_path / "memory.pickle"
    _, report, script = _run_profile(tmp_path, "strict", ("--trace", str(trace), "--memory-snapshot", str(snap)))
    events = json.loads(trace.read_text())["traceEvents"]
    programs = [e for e in events if e.get("cat") == "tpu_program"]
    assert len(programs) == report["device_events"] > 0
    assert any(e["name"].startswith("aten::mm") for e in programs)  # step()'s x @ w
    assert any(e.get("cat") == "cpu_op" and e["name"] == "aten::mm" for e in events)
    import pickle

    with open(snap, "rb") as f:
        data = pickle.load(f)
    assert "segments:" in _memory_viz.segsum(data)
    assert any(e["action"] == "alloc" and any(fr["filename"] == script for fr in e["frames"])
               for e in data["device_traces"][0])
