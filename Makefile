# socketlab: `make run` sets up and runs the main job on localhost; `make test` sets up and runs the tests.
# Both create or update .venv themselves and are safe to run again.

PYTHON   ?= python3
VENV     := .venv
PY       := $(VENV)/bin/python
STAMP    := $(VENV)/.installed
EXTRAS   ?= dev,serve

.PHONY: setup system-deps run test lint native clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

system-deps:
	bash scripts/system-deps.sh

setup: system-deps $(STAMP)

native: setup
	$(MAKE) -C native

run: setup
	$(VENV)/bin/orchestrate hosts

lint: setup
	$(VENV)/bin/ruff check src tests bench collectors playbooks
	$(VENV)/bin/ansible-lint --profile production playbooks roles

test: setup
	$(MAKE) lint
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build *.egg-info
