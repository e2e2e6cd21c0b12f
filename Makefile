# accord: `make demo` runs the main job, `make test` is what CI runs (pytest, with lint, the
# contracts' artifacts and the wheel checked beside it: scripts/test_all.sh). Both set
# themselves up.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
PY_STAMP := $(VENV)/.accord-installed
NPM_STAMP := node_modules/.accord-installed
# uv resolves and installs the same packages as pip from the same index, in parallel and
# from a cache of unpacked wheels (docs/development.md, "Dependencies, and why"). It compiles
# the bytecode at install as pip does (--compile-bytecode): with PYTHONDONTWRITEBYTECODE set, as on this machine,
# Python never writes it later, and every process would compile web3 & co. from source (an
# import of web3, sqlalchemy and fastapi: 1.75 s with bytecode, 3.7 s without). pip stays in
# the venv: `pip wheel` builds the wheel.
UV_REQUIREMENT := uv>=0.13,<0.14
UV := $(VENV)/bin/uv

.PHONY: setup box demo test lint bench contracts wheel clean

# The three at once: pip's and npm's downloads and Debian's packages do not wait on each other.
setup:
	@$(MAKE) --no-print-directory -j3 --output-sync=target $(PY_STAMP) $(NPM_STAMP) box

# bubblewrap and libseccomp from Debian: strangers' code runs in their box or not at all.
box:
	scripts/install_bubblewrap.sh

$(PY_STAMP): pyproject.toml
	@echo "==> setup: installing accord and its dependencies from PyPI into $(VENV)"
	@echo "    (web3, fastapi, sqlmodel, openai, the test tools...) with uv; under a minute"
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet '$(UV_REQUIREMENT)'
	$(UV) pip install --quiet --python $(PY) --upgrade pip
	$(UV) pip install --quiet --compile-bytecode --python $(PY) -e '.[dev]'
	@echo "==> setup: $(VENV) ready"
	touch $@

$(NPM_STAMP): package.json package-lock.json
	@echo "==> setup: installing anvil and solc from npm into node_modules (npm ci); a minute or so"
	npm ci --no-audit --no-fund --loglevel=error
	@echo "==> setup: node_modules ready"
	touch $@

demo: setup
	$(PY) scripts/demo.py

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(PY) scripts/typecheck.py
	$(VENV)/bin/vulture

test: setup
	scripts/install_browser.sh
	scripts/test_all.sh

bench: setup
	scripts/with_postgres.sh $(PY) scripts/bench/run_all.py

contracts: setup
	$(PY) scripts/compile_contracts.py

wheel: setup
	scripts/check_wheel.sh

clean:
	rm -rf $(VENV) node_modules .accord .pytest_cache .mypy_cache .ruff_cache
