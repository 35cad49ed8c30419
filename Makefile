# foundry-checkpoint: two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PRE_VENV := .venv-pre
# The frameworks and hosts whose newest pre-releases `make test-pre` tries, past the extras' bounds.
PRE_PACKAGES := azure-ai-agentserver-core azure-ai-agentserver-invocations \
	azure-ai-agentserver-responses agent-framework-core agent-framework-foundry-hosting \
	langgraph langgraph-checkpoint
NODE_STAMP := node_modules/.installed
# The explorer page's browser tests drive Debian's Chromium (Playwright with executable_path: no
# browser download). Installed when missing; sudo unless already root.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-pre test-langgraph-suite test-langgraph-store-suite unit lint format docs bench install clean chromium dist

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,autogen]' --group dev
	touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

chromium:
	command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
		{ $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium; }

install: $(STAMP) $(NODE_STAMP)

demo: $(STAMP)
	$(PY) samples/quickstart.py

test: $(STAMP) $(NODE_STAMP) chromium
	$(PY) -m pytest -q

# A fast subset (under 30 s): tests/unit without the tests marked as needing the emulator,
# Azurite, several processes, a notebook kernel or a long time (markers in pyproject.toml,
# applied in tests/conftest.py). `make test` runs everything.
UNIT_MARKERS := not emulator and not azurite and not multiprocess and not notebooks and not slow
unit: $(STAMP)
	$(PY) -m pytest -q -p no:cacheprovider -m "$(UNIT_MARKERS)" tests/unit

# The suite on the newest pre-releases, in a venv of its own: install as usual (without the
# constraints file), then upgrade the frameworks and hosts with --pre past the extras' upper
# bounds (pip reports the bounds it overrides). Run it before raising a bound in pyproject.toml.
test-pre: $(NODE_STAMP) chromium
	test -x $(PRE_VENV)/bin/python || $(PYTHON) -m venv $(PRE_VENV)
	$(PRE_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PRE_VENV)/bin/python -m pip install --quiet --pre -e '.[all,autogen]' --group dev
	$(PRE_VENV)/bin/python -m pip install --quiet --pre --upgrade $(PRE_PACKAGES)
	$(PRE_VENV)/bin/python -m pip list 2>/dev/null | grep -iE 'agentserver|agent-framework|langgraph'
	$(PRE_VENV)/bin/python -m pytest -q

# LangGraph's own test suite (the sdist of the installed langgraph, downloaded from the package
# index) with FoundryCheckpointer as a checkpointer variant beside InMemorySaver: counts per
# variant, non-zero exit when a test fails with ours and passes with InMemorySaver (about
# four minutes; not part of `make test`). See tests/langgraph_suite/run.py and CONTRIBUTING.md.
test-langgraph-suite: $(STAMP)
	$(PY) tests/langgraph_suite/run.py

# LangGraph's own store tests (the sdists of the installed langgraph-checkpoint,
# langgraph-checkpoint-sqlite and langgraph, and of the newest langgraph-checkpoint-postgres,
# from the package index) on FoundryStore beside the store each was written for: counts per
# tree and variant, non-zero exit when a test fails on FoundryStore and passes on the original
# (except the deviations listed with their reasons in tests/langgraph_suite/store_deviations.py;
# about five minutes; not part of `make test`).
test-langgraph-store-suite: $(STAMP)
	$(PY) tests/langgraph_suite/run.py store

lint: $(STAMP)
	$(VENV)/bin/ruff check foundry_checkpoint foundry_checkpoint_maf foundry_checkpoint_autogen tests \
		benchmarks samples
	$(VENV)/bin/mypy --strict foundry_checkpoint foundry_checkpoint_maf foundry_checkpoint_autogen
	$(VENV)/bin/mypy tests
	$(VENV)/bin/lint-imports

format: $(STAMP)
	$(VENV)/bin/ruff check --fix foundry_checkpoint foundry_checkpoint_maf foundry_checkpoint_autogen \
		tests benchmarks samples
	$(VENV)/bin/ruff format foundry_checkpoint foundry_checkpoint_maf foundry_checkpoint_autogen \
		tests benchmarks samples

bench: $(STAMP) $(NODE_STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,bench]'
	$(PY) -m benchmarks --install-postgres

# The wheel and the sdist in dist/, checked by twine (tests/packaging installs the wheel
# into fresh virtual environments, one framework's extra each).
dist: $(STAMP)
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(VENV)/bin/twine check --strict dist/*

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(PRE_VENV) node_modules
