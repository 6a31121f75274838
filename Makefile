# socketlab: `make run` sets up and runs the main job on localhost; `make test` sets up and runs the tests.
# Both create or update .venv themselves and are safe to run again.

PYTHON   ?= python3
VENV     := .venv
PY       := $(VENV)/bin/python
STAMP    := $(VENV)/.installed
EXTRAS   ?= dev,serve,ref,aws
# guidellm for the serving peer check (tests/test_serve_peer_guidellm.py), in a venv of its own
# (its pins may clash with ours); under .cache/, which git ignores. torch pinned as in
# pyproject.toml, so the local CPU wheel is used and no CUDA build is downloaded.
GUIDELLM_VENV := .cache/venv-guidellm
GUIDELLM_STAMP := $(GUIDELLM_VENV)/.installed

.PHONY: setup system-deps run quickstart test lint native clean guidellm-venv checkpatch-tool \
	collection wheel

$(STAMP): pyproject.toml setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[$(EXTRAS)]'
	touch $@

system-deps:
	bash scripts/system-deps.sh

setup: system-deps $(STAMP)

$(GUIDELLM_STAMP):
	test -x $(GUIDELLM_VENV)/bin/python || $(PYTHON) -m venv $(GUIDELLM_VENV)
	$(GUIDELLM_VENV)/bin/python -m pip install -q 'guidellm==0.8.1' 'torch==2.13.*'
	touch $@

guidellm-venv: $(GUIDELLM_STAMP)

# the kernel's checkpatch.pl for the driver's style test (tests/test_driver.py), under .cache/
checkpatch-tool:
	bash scripts/fetch-checkpatch.sh

native: setup
	$(MAKE) -C native

# The main job on localhost, in two parts (each resumable: a second `make run` skips runs
# already stored; failed runs are listed in the reports, which are written either way):
# 1. experiments/quickstart.yaml, the 3-minute tour of the orchestrator (build, run, store, report);
# 2. experiments/campaign-oct.yaml with the quick profile, then the published-vs-measured
#    report (under 10 minutes on 2 cores).
run: setup
	-$(VENV)/bin/orchestrate run experiments/quickstart.yaml --plain
	$(VENV)/bin/orchestrate report quickstart
	@echo "quickstart results: $(CURDIR)/results/quickstart/ (store.sqlite, runs/<run key>/); report: $(CURDIR)/results/quickstart/report.md"
	-$(VENV)/bin/orchestrate run experiments/campaign-oct.yaml --profile quick --plain
	$(VENV)/bin/orchestrate report campaign-oct --format html
	@echo "campaign-oct report: $(CURDIR)/results/campaign-oct/report.html and report.md (results: $(CURDIR)/results/campaign-oct/)"

# Only the 3-minute tour.
quickstart: setup
	-$(VENV)/bin/orchestrate run experiments/quickstart.yaml --plain
	$(VENV)/bin/orchestrate report quickstart
	@echo "results: $(CURDIR)/results/quickstart/ (store.sqlite, runs/<run key>/); report: $(CURDIR)/results/quickstart/report.md"

COLLECTION := ansible_collections/socketlab/lab

# The socketlab.lab collection's tarball and the wheel, into dist/ (docs/collection.md; the tests
# build both too: tests/test_collection.py, tests/test_wheel.py).
collection: setup
	$(VENV)/bin/ansible-galaxy collection build --force --output-path dist $(COLLECTION)

wheel: setup
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .

# What `make lint` checks: Python (ruff's rules, ruff's format, 100 columns), src/'s types (mypy,
# [tool.mypy] in pyproject.toml), native/'s C format (clang-format, native/.clang-format) and the
# Ansible content (ansible-lint). `ruff format <paths>` and `$(CLANG_FORMAT) -i <files>` fix the
# format; CONTRIBUTING.md says more.
PY_TREE      := src tests bench collectors scripts playbooks ansible_collections setup.py
CLANG_FORMAT ?= clang-format-16

lint: setup
	$(VENV)/bin/ruff check $(PY_TREE)
	$(VENV)/bin/ruff format --check $(PY_TREE)
	$(VENV)/bin/mypy
	$(PY) scripts/layers.py --check > /dev/null  # no import cycle between parts (docs/architecture.md)
	@echo "layers: no import cycle"
	find native -path native/build -prune -o -name '*.[ch]' -print | sort \
		| xargs $(CLANG_FORMAT) --dry-run --Werror
	@echo "clang-format: native/ formatted"
	$(VENV)/bin/ansible-lint --profile production $(COLLECTION) playbooks roles isolate.yml verify.yml restore.yml

# Two pytest-xdist workers by default (a test file stays on one worker, so its module fixtures
# are built once): most tests wait on subprocesses, ssh and Ansible, and one process leaves a
# core idle. Tests that change kernel knobs or measure speed run with nothing beside them
# (tests/conftest.py). TEST_WORKERS=0 runs in one process.
TEST_WORKERS ?= 2

test: setup guidellm-venv checkpatch-tool
	$(MAKE) lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

clean:
	rm -rf $(VENV) build dist *.egg-info
