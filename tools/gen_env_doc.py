"""Writes docs/env.md from the one registry of TORCH_TPU_* variables (csrc/common/config.cpp).

Run: .venv/bin/python tools/gen_env_doc.py   (tests/test_docs.py checks the file is current)
"""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "env.md"

PYTHON_EQUIVALENT = {
    "TORCH_TPU_MODE": "`torch_tpu.set_mode(name)`, `with torch_tpu.mode(name):`, `torch_tpu.get_mode()`",
    "TORCH_TPU_LAUNCH_BLOCKING": "`torch_tpu.set_mode(\"debug\")`",
    "TORCH_TPU_DEFER_AND_FUSE": "`torch_tpu.set_mode(\"fused\")`",
    "TORCH_TPU_FALLBACK": "`torch_tpu.set_fallback(\"cpu\" | None)`",
    "TORCH_TPU_NUM_DEVICES": "read once at start-up (`torch.tpu.device_count()`)",
    "TORCH_TPU_HOST_MEMORY": "read once at start-up (`torch.tpu.get_device_properties().total_memory`)",
    "TORCH_TPU_CACHE_DIR": "read once at import (`torch_tpu.cache_stats()[\"directory\"]`)",
    "TORCH_TPU_CACHE_KEY_FILE": "read once at import",
    "TORCH_TPU_CACHE_MAX_BYTES": "read once at import (`torch_tpu.cache_stats()[\"max_bytes\"]`)",
}


def render() -> str:
    import torch_tpu

    lines = [
        "# Environment variables",
        "",
        "Every knob torch_tpu reads. This file is generated from the registry in",
        "`csrc/common/config.cpp` by `tools/gen_env_doc.py`; `torch_tpu.env_vars()` lists the same",
        "table at run time.",
        "",
        "| variable | default | meaning | Python |",
        "|---|---|---|---|",
    ]
    for name, default, doc in torch_tpu.env_vars():
        py = PYTHON_EQUIVALENT.get(name, "-")
        lines.append(f"| `{name}` | `{default}` | {doc} | {py} |" if default else f"| `{name}` | (see meaning) | {doc} | {py} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    DOC.write_text(render())
    print(f"wrote {DOC}")
