# dtype-bench: two commands do everything on a fresh machine.
#   make smoke   set up, run the embedded default study (params/smoke.yaml) on the CPU and print its
#                summary, which ends with a smoke answer table: scenario A learns, fp16_fp16_states
#                diverges, the other scenarios are too short to learn (tiny models, not a recommendation)
#   make test    set up, run the test suite (CPU, tiny models, synthetic data)
#   make test-fast  the same without the slow tier (tests that start processes or train for minutes)
#   make lab     set up, JupyterLab with the executed notebooks read-only (dtype_bench/host/lab.py)
PYTHON ?= python3
# The torch build to install when none is present. Without an NVIDIA GPU the default is the
# CPU build 2.13.0 (a local wheel on CI machines); with one, a plain `torch` (CUDA build).
TORCH_SPEC ?= $(shell if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then echo torch; else echo torch==2.13.0; fi)
STAMP := .setup.stamp
# The suite over TEST_WORKERS processes (pytest-xdist); a file's tests share one (tests/conftest.py).
# `make test TEST_WORKERS=1` runs it in one process, as plain `pytest` does.
TEST_WORKERS ?= 2
TEST_PARALLEL = $(if $(filter 1,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

.PHONY: setup smoke test test-fast quick configs lab clean-stamp

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install "$(TORCH_SPEC)"
	$(PYTHON) -m pip install -e ".[dev]"
	@touch $(STAMP)

test: setup
	$(PYTHON) -m pytest -q $(TEST_PARALLEL)

test-fast: setup
	$(PYTHON) -m pytest -q -m "not slow" $(TEST_PARALLEL)

# tiny models run fastest on one intra-op thread (a thread barrier per tiny kernel costs more than it saves)
smoke: setup
	OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} dtype-bench sweep params/smoke.yaml

quick: setup
	dtype-bench sweep params/quick.yaml

lab: setup
	jupyter lab --ServerApp.contents_manager_class=dtype_bench.host.lab.ExecutedReadOnly

configs: setup
	dtype-bench configs

clean-stamp:
	rm -f $(STAMP)
