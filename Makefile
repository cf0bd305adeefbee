# `make demo` and `make test` set everything up first (scripts/bootstrap.sh is idempotent).
.PHONY: setup demo test test-microvm-battery lint bench clean

setup:
	@bash scripts/bootstrap.sh

demo: setup
	@echo "demo 1/4: a model-written script in the process sandbox"
	@.venv/bin/python examples/demo/run_demo.py
	@echo "demo 2/4: external records changed only through the write broker"
	@.venv/bin/python examples/broker/demo.py
	@echo "demo 3/4: one task, one manifest, every backend this host runs (a skip quotes contain doctor)"
	@.venv/bin/python examples/demo/ladder.py
	@echo "demo 4/4: a small batch on a local two-node Ray cluster (one job is refused network, one has a bad manifest)"
	@.venv/bin/contain fleet run examples/fleet/jobs.jsonl --address local --nodes 2 --slots 2; test $$? -le 1

test: setup
	@echo "test: ruff, mypy, pytest"
	@.venv/bin/ruff check src tests
	@.venv/bin/mypy
	@.venv/bin/python -m pytest -q --durations=20

# The escape battery on the microvm backend alone (`make test` runs it too; docs/probe.md, "microvm").
test-microvm-battery: setup
	@echo "test: the escape battery on the microvm backend"
	@.venv/bin/python -m pytest -q -m microvm_battery tests/integration/test_battery_microvm.py

lint: setup
	@.venv/bin/ruff check src tests
	@.venv/bin/mypy

bench: setup
	@.venv/bin/contain bench startup

clean:
	rm -rf .venv build src/*.egg-info
