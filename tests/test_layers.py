"""The layers of csrc/ point one way (tools/check_layers.py; the build runs it too)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import check_layers  # noqa: E402


def test_csrc_has_no_layer_back_edge() -> None:
    assert check_layers.check(str(ROOT / "csrc")) == []


def _tree(tmp_path: Path, files: dict) -> str:
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return str(tmp_path)


def test_an_include_that_points_up_is_a_back_edge(tmp_path: Path) -> None:
    csrc = _tree(tmp_path, {
        "device/stream.cpp": '#include "device/stream.h"\n#include "runtime/runtime.h"\n#include "exec/call.h"\n',
        "compiler/passes/p.cpp": '#include "ir/graph.h"\n#include "compiler/program.h"\n',
        "ir/graph.cpp": '#include "common/config.h"\n',
    })
    errors = check_layers.check(csrc)
    assert len(errors) == 3, errors
    assert any(e.startswith("csrc/device/stream.cpp:3: layer back-edge: device") and '"exec/call.h"' in e for e in errors)
    assert any("passes may not include \"compiler/program.h\"" in e for e in errors)
    assert any(e.startswith("csrc/ir/graph.cpp:1:") for e in errors)


def test_runtime_internals_are_private(tmp_path: Path) -> None:
    csrc = _tree(tmp_path, {
        "device/allocator.cpp": '#include "runtime/host/scratch_allocator.h"\n',
        "python/b.cpp": '#include "runtime/host/native_kernels.h"\n',
        "runtime/select.cpp": '#include "runtime/pjrt/pjrt_runtime.h"\n',
    })
    errors = check_layers.check(csrc)
    assert len(errors) == 1 and "private to the runtime layer" in errors[0], errors
