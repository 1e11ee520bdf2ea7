"""tests/hf needs transformers (requirements-dev.txt); without it the directory is skipped."""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers", reason="tests/hf needs transformers (requirements-dev.txt)")
transformers.logging.set_verbosity_error()
