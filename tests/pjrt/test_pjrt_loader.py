"""The PJRT plugin loader and runtime selection, on any machine: clear errors for a missing
plugin, a bad path, a library that is no plugin and an incompatible API version; the compile
options bytes as XLA parses them; and, when a PJRT plugin is installed (e.g. `pip install
jax-cuda13-pjrt`, or libtpu), that it loads and that creating a client either works or fails with
a Python exception naming the plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import torch_tpu  # noqa: F401  (registers the backend, sets the plugin search path)
from torch_tpu import _C
from pjrt_cpu_plugin import cpu_plugin_path

REPO = Path(__file__).resolve().parents[2]


def _env(**overrides: str | None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    for k, v in overrides.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def _import_error(**overrides: str | None) -> str:
    """stderr of `import torch_tpu` in a fresh process that is expected to fail."""
    r = subprocess.run([sys.executable, "-c", "import torch_tpu"], env=_env(**overrides), capture_output=True,
                       text=True, timeout=120)
    assert r.returncode != 0, "import torch_tpu unexpectedly succeeded"
    return r.stderr


def test_default_runtime_is_host_without_a_plugin() -> None:
    if os.environ.get("TORCH_TPU_RUNTIME", "auto") not in ("auto", "host") or os.environ.get("TORCH_TPU_PJRT_PLUGIN"):
        pytest.skip("TORCH_TPU_RUNTIME/TORCH_TPU_PJRT_PLUGIN are set for this run")
    if _C._pjrt_discover():
        pytest.skip(f"a PJRT plugin is installed here ({_C._pjrt_discover()[0]}): auto may select it")
    assert _C._runtime_name() == "host"
    assert _C._pjrt_info() is None


def test_selecting_pjrt_without_a_plugin_names_what_was_looked_for() -> None:
    if _C._pjrt_discover():
        pytest.skip(f"a PJRT plugin is installed here ({_C._pjrt_discover()[0]})")
    err = _import_error(TORCH_TPU_RUNTIME="pjrt", TORCH_TPU_PJRT_PLUGIN=None)
    assert "no PJRT plugin found" in err
    assert "TORCH_TPU_PJRT_PLUGIN" in err
    assert "libtpu/libtpu.so" in err and "jax_plugins/xla_cuda13/xla_cuda_plugin.so" in err


def test_unknown_runtime_name() -> None:
    err = _import_error(TORCH_TPU_RUNTIME="tpu9000")
    assert "unknown TORCH_TPU_RUNTIME 'tpu9000'" in err


def test_bad_plugin_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_TPU_PJRT_PLUGIN", "/nonexistent/xla_cuda_plugin.so")
    with pytest.raises(RuntimeError, match="TORCH_TPU_PJRT_PLUGIN=/nonexistent/xla_cuda_plugin.so does not exist"):
        _C._pjrt_plugin_path()
    with pytest.raises(RuntimeError, match="/nonexistent/xla_cuda_plugin.so does not exist"):
        _C._pjrt_load("/nonexistent/xla_cuda_plugin.so")


def test_bad_plugin_path_at_import() -> None:
    err = _import_error(TORCH_TPU_PJRT_PLUGIN="/nonexistent/xla_cuda_plugin.so", TORCH_TPU_RUNTIME=None)
    assert "TORCH_TPU_PJRT_PLUGIN=/nonexistent/xla_cuda_plugin.so does not exist" in err


def test_library_that_is_not_a_plugin() -> None:
    libc10 = next((Path(torch.__file__).parent / "lib").glob("libc10.so*"))
    with pytest.raises(RuntimeError, match="does not export GetPjrtApi"):
        _C._pjrt_load(str(libc10))


def test_file_that_is_not_a_library(tmp_path: Path) -> None:
    fake = tmp_path / "xla_cuda_plugin.so"
    fake.write_text("not an ELF file")
    with pytest.raises(RuntimeError, match="cannot load PJRT plugin"):
        _C._pjrt_load(str(fake))


def test_api_version_check() -> None:
    # Synthetic numbers: a plugin reporting them is accepted or refused before any call into it.
    ok = _C._pjrt_check_api_version(0, 117, 4096, 24)
    assert ok == ""
    assert "major version 0" in _C._pjrt_check_api_version(1, 2, 4096, 24)
    assert "older than the oldest supported" in _C._pjrt_check_api_version(0, 10, 4096, 24)
    assert "function table" in _C._pjrt_check_api_version(0, 117, 64, 24)


def test_discovery_finds_a_plugin_in_the_search_path(tmp_path: Path) -> None:
    plugin = tmp_path / "jax_plugins" / "xla_cuda13" / "xla_cuda_plugin.so"
    plugin.parent.mkdir(parents=True)
    plugin.write_bytes(b"")
    try:
        _C._pjrt_set_search_path([str(tmp_path)])
        assert _C._pjrt_discover() == [str(plugin)]
    finally:
        _C._pjrt_set_search_path(sys.path)


def test_compile_options_parse_as_xla_compile_options() -> None:
    pytest.importorskip("jax", reason="jax is not installed (optional extra)")
    from jax._src.lib import xla_client as xc
    opts = xc.CompileOptions.ParseFromString(_C._pjrt_compile_options())
    assert opts.executable_build_options.num_replicas == 1
    assert opts.executable_build_options.num_partitions == 1
    assert opts.compile_portable_executable  # one executable runs on any tpu:N


def _installed_plugins() -> list[str]:
    # libtpu off a TPU VM blocks for minutes on the GCE metadata server: only on a TPU machine.
    found = [p for p in _C._pjrt_discover() if "libtpu" not in p or _C._pjrt_tpu_present()]
    cpu = cpu_plugin_path()  # never discovered (the host runtime beats it on a CPU), but real
    return found + ([str(cpu)] if cpu is not None else [])


@pytest.mark.parametrize("index", [0, 1])
def test_installed_plugin_loads_and_reports_its_version(index: int) -> None:
    plugins = _installed_plugins()
    if len(plugins) <= index:
        pytest.skip("no (further) PJRT plugin installed: pip install jax-cuda13-pjrt (works without a GPU) "
                    "or put its directory on PYTHONPATH")
    info = _C._pjrt_load(plugins[index])
    major, minor = info["api_version"]
    assert major == 0 and minor >= 57
    assert info["path"] == plugins[index]


def test_installed_plugin_accepts_our_struct_sizes() -> None:
    plugins = [p for p in _installed_plugins() if "cuda" in p or "libtpu" in p or "cpu_plugin" in p]
    if not plugins:
        pytest.skip("no XLA-based PJRT plugin installed: pip install lammps-jax-pjrt-cpu or jax-cuda13-pjrt")
    sizes = _C._pjrt_struct_sizes(plugins[0])
    assert len(sizes) == 25  # PJRT_Buffer_OnDeviceSizeInBytes_Args joined the probe (device memory figures)
    for name, ours, plugin in sizes:
        assert plugin != -1, f"{name}: the plugin did not name the size it expects"
        assert ours >= plugin, f"{name}: we pass {ours} bytes, the plugin needs {plugin} (API grew)"


def test_installed_plugin_client_or_clear_error() -> None:
    plugins = [p for p in _installed_plugins() if "cuda" in p]
    if not plugins:
        pytest.skip("no CUDA PJRT plugin installed: pip install jax-cuda13-pjrt (works without a GPU)")
    if torch.cuda.is_available():
        info = _C._pjrt_client_info(plugins[0], "preallocate=false")
        assert info["platform"] == "cuda" and info["devices"]
    else:
        with pytest.raises(RuntimeError, match=r"PJRT Client_Create failed .*\[plugin .*xla_cuda_plugin.so\]"):
            _C._pjrt_client_info(plugins[0], "preallocate=false")

