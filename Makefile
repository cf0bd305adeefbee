# `make demo` and `make test` set everything up first (scripts/bootstrap.sh is idempotent).
.PHONY: setup demo test lint bench clean

setup:
	@bash scripts/bootstrap.sh

demo: setup
	@echo "demo 1/3: a model-written script in the process sandbox"
	@.venv/bin/python examples/demo/run_demo.py
	@echo "demo 2/3: external records changed only through the write broker"
	@.venv/bin/python examples/broker/demo.py
	@echo "demo 3/3: one task, one manifest, every backend this host runs (a skip quotes contain doctor)"
	@.venv/bin/python examples/demo/ladder.py

test: setup
	@echo "test: ruff, mypy, pytest"
	@.venv/bin/ruff check src tests
	@.venv/bin/mypy
	@.venv/bin/python -m pytest -q

lint: setup
	@.venv/bin/ruff check src tests
	@.venv/bin/mypy

bench: setup
	@.venv/bin/contain bench startup

clean:
	rm -rf .venv build src/*.egg-info
