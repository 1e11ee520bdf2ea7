"""tests/frameworks runs in .venv-frameworks (`make test-frameworks`), which has TorchTitan;
in any other venv the directory is skipped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torchtitan", reason="tests/frameworks needs TorchTitan: run `make test-frameworks`")
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def titan_assets(tmp_path_factory) -> Path:
    import assets

    root = tmp_path_factory.mktemp("titan_assets")
    assets.build(root)
    return root
