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

.PHONY: all setup build demo test test-cpp test-py test-full ops-table format clean

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

format:
	clang-format -i $$(find csrc tests/cpp -name '*.cpp' -o -name '*.h')

clean:
	rm -rf $(BUILD) torch_tpu/_C*.so
