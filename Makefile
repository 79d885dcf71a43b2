# The two commands a newcomer needs: `make demo` and `make test`. Both work on a fresh clone.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint typecheck pytest install bytecode crds postgres chromium bench clean

# uv (from PyPI, into the venv) installs what pip would, from PyPI, downloading in parallel and reusing
# its cache (~/.cache/uv), so a second clone installs in seconds (tests/dev/test_fresh_clone.py times
# one); like pip it compiles the bytecode at install time (imports stay fast with PYTHONDONTWRITEBYTECODE)
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet uv
	$(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ".[test,plot,bench]"
	touch $(STAMP)

install: $(STAMP) chromium bytecode

# an editable install compiles the dependencies' bytecode but not the package's own modules, so with
# PYTHONDONTWRITEBYTECODE every process compiled ~170 modules again (0.13 s of each benchmark's
# startup); compileall writes their __pycache__ (gitignored) and, run again, only what changed since
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q queueing

demo: $(STAMP)
	$(BIN)/queueing crds --check
	$(BIN)/queueing allocate -f examples/allocate/h200-node.yaml -o yaml || true
	@mkdir -p out
	$(BIN)/queueing simulate -f examples/simulate/ -o table --plot out/demo.png

postgres:
	@bash .ci/ensure-postgres

# the dashboard's browser tests drive Debian's chromium (Playwright's own browser download is not used)
chromium:
	@test -x /usr/bin/chromium || { echo "installing Debian's chromium for tests/dashboard"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP) postgres chromium
	$(BIN)/python -m pytest -q -p no:cacheprovider -n 2 --dist loadscope

test: lint typecheck pytest

crds: $(STAMP)
	$(BIN)/queueing crds

bench: $(STAMP) postgres bytecode
	$(BIN)/python bench/allocator.py
	$(BIN)/python bench/ledger.py
	$(BIN)/python bench/admission.py
	$(BIN)/python bench/admission.py --shape large
	$(BIN)/python bench/controller_path.py
	$(BIN)/python bench/e2e.py --fraction 0.1

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
