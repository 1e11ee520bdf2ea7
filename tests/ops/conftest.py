"""Shared by the op tests: every check must run our lowering, so the opt-in CPU fallback is off
while a module runs (a test elsewhere may have switched it on), and restored after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import torch_tpu


@pytest.fixture(autouse=True, scope="module")
def _no_fallback() -> Iterator[None]:
    previous = torch_tpu.fallback_enabled()
    torch_tpu.set_fallback(None)  # a missing lowering must fail here, not run on CPU
    yield
    torch_tpu.set_fallback("cpu" if previous else None)
