"""Our PJRT declarations (csrc/runtime/pjrt/c_api.h) against an official pjrt_c_api.h, when an
installed package ships one (tensorflow does; jaxlib, the jax PJRT plugins and libtpu do not):
tests/pjrt/layout_check.cpp static_asserts that every field offset, struct size and PJRT_Api
slot we use is the official one. Skips when no such header or no C++ compiler is present."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CANDIDATES = ("tensorflow/include/tensorflow/compiler/xla/pjrt/c/pjrt_c_api.h", "tensorflow/include/xla/pjrt/c/pjrt_c_api.h")


def _official_header() -> Path | None:
    for d in sys.path:
        for rel in CANDIDATES:
            p = Path(d) / rel
            if p.is_file():
                return p
    return None


def test_declarations_match_the_official_header() -> None:
    header = _official_header()
    if header is None:
        pytest.skip("no installed package ships pjrt_c_api.h (tensorflow does; not a dependency)")
    cxx = shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no C++ compiler to compile tests/pjrt/layout_check.cpp")
    r = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", f"-DPJRT_C_API_HEADER=\"{header}\"",
                        f"-I{REPO / 'csrc'}", str(REPO / "tests/pjrt/layout_check.cpp")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
