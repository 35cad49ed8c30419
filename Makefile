# foundry-checkpoint: two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: demo test lint docs bench install clean

$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,test,docs]'
	touch $(STAMP)

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

install: $(STAMP) $(NODE_STAMP)

demo: $(STAMP)
	$(PY) samples/quickstart.py

test: $(STAMP) $(NODE_STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check foundry_checkpoint foundry_checkpoint_maf tests benchmarks samples
	$(VENV)/bin/mypy --strict foundry_checkpoint foundry_checkpoint_maf

bench: $(STAMP) $(NODE_STAMP)
	$(PY) -m pip install --quiet -c constraints.txt -e '.[all,bench]'
	$(PY) -m benchmarks --install-postgres

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) node_modules
