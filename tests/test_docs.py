"""Documentation that is generated from code must be current."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import gen_env_doc  # noqa: E402


def test_env_doc_is_current() -> None:
    assert (ROOT / "docs" / "env.md").read_text() == gen_env_doc.render(), "run tools/gen_env_doc.py"


def test_every_env_var_is_documented_in_the_registry() -> None:
    """Any TORCH_TPU_* name used in the sources must be registered (so it appears in env.md)."""
    import re

    import torch_tpu

    registered = {name for name, _, _ in torch_tpu.env_vars()}
    used = set()
    for path in list((ROOT / "csrc").rglob("*.cpp")) + list((ROOT / "torch_tpu").rglob("*.py")):
        used |= set(re.findall(r"\bTORCH_TPU_[A-Z_]+\b", path.read_text()))
    test_only = {"TORCH_TPU_TEST_FULL"}
    assert used - registered - test_only == set()
