# accord: `make demo` runs the main job, `make test` is what CI runs. Both set themselves up.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.accord-installed
NPM_STAMP := node_modules/.accord-installed

.PHONY: setup demo test lint bench contracts clean

setup: $(PY_STAMP) $(NPM_STAMP)

$(PY_STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

$(NPM_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

demo: setup
	$(PY) scripts/demo.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: setup lint
	$(PY) scripts/compile_contracts.py --check
	scripts/install_browser.sh
	scripts/with_postgres.sh $(VENV)/bin/pytest -q -p no:cacheprovider -n 3 --dist loadfile --durations=10

bench: setup
	$(PY) scripts/bench/run_all.py

contracts: setup
	$(PY) scripts/compile_contracts.py

clean:
	rm -rf $(VENV) node_modules .accord .pytest_cache .mypy_cache .ruff_cache
