# Two commands do all set-up on a fresh machine:  make run   and   make test
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test lint install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned: anything that lets pip choose would fetch a multi-GB CUDA build.
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[test,lint]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(PY) -m hybridrl.trainer.main_ppo $(ARGS)

# Lint, format and import order (ruff), then types (mypy): what CI runs before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check hybridrl tests bench examples
	$(VENV)/bin/ruff format --check hybridrl tests bench examples
	$(VENV)/bin/mypy

test: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) outputs
