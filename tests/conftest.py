"""Suite-wide setup: the program cache's disk tier writes to a temporary directory, never to the
user's ~/.cache, and signs entries with a key in another temporary directory, never the user's
~/.config/torch_tpu/cache.key (subprocesses started by tests inherit the variables). A test that
needs its own directory sets TORCH_TPU_CACHE_DIR for its subprocess explicitly."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

if "TORCH_TPU_CACHE_DIR" not in os.environ:
    _cache_dir = tempfile.mkdtemp(prefix="torch_tpu_test_cache_")
    os.environ["TORCH_TPU_CACHE_DIR"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
if "TORCH_TPU_CACHE_KEY_FILE" not in os.environ:
    _key_dir = tempfile.mkdtemp(prefix="torch_tpu_test_key_")
    os.environ["TORCH_TPU_CACHE_KEY_FILE"] = os.path.join(_key_dir, "cache.key")
    atexit.register(shutil.rmtree, _key_dir, ignore_errors=True)
