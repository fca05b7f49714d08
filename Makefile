# make test  : set-up (pip + Kafka jars) then the whole test suite (this is the project's test command)
# make bench : set-up then the side-by-side benchmark, ours vs Apache Kafka 4.x (writes docs/benchmarks.md);
#              BENCH_ARGS=--quick for a smoke run, BENCH_ARGS="--scenarios 'p-1k-*'" for a subset
# make fuzz  : 10^6 mutated Kafka requests, then 10^6 mutated Pulsar commands, each against a broker it starts,
#              health-checked every 10^5 (tests/fuzz.py, tests/fuzz_pulsar.py);
#              FUZZ_ARGS="--frames 100000 --seed 7" to change the runs
# make chaos-short : the fault suite's short form alone (tests/test_chaos_short.py, part of make test), each
#              fault kind once
# make chaos : the fault suite's full matrix (tests/chaos/runner.py, docs/cluster.md): every fault kind
#              CHAOS_ARGS="--trials 3" times under load, a table of anomalies and stalls at the end;
#              CHAOS_ARGS="--trials 1 --faults broker-kill,bookie-kill" for a subset
PYTHON ?= python3
PYTEST_ARGS ?=
BENCH_ARGS ?=
FUZZ_ARGS ?= --frames 1000000
CHAOS_ARGS ?= --trials 3

.PHONY: setup test bench lint fuzz typecheck chaos chaos-short

setup:
	PYTHON=$(PYTHON) bash scripts/setup

# KOP_FAIL_ON_SKIP=1: a skipped test fails the run (tests/conftest.py) - absent requirements must be loud.
test: setup
	@rc=0; KOP_FAIL_ON_SKIP=1 $(PYTHON) -m pytest $(PYTEST_ARGS) || rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests (exit 5) - treated as failure" >&2; fi; \
	exit $$rc

bench: setup
	$(PYTHON) bench/run.py $(BENCH_ARGS)

fuzz: setup
	$(PYTHON) -m tests.fuzz $(FUZZ_ARGS)
	$(PYTHON) -m tests.fuzz --protocol pulsar $(FUZZ_ARGS)

chaos: setup
	$(PYTHON) -m tests.chaos.runner $(CHAOS_ARGS)

# the short form alone (each fault kind once, 3-4 min on a quiet machine, 5 at a load of 15); `make test` runs it too
chaos-short: setup
	$(PYTHON) -m pytest tests/test_chaos_short.py

lint:
	$(PYTHON) -m ruff check .

typecheck:
	$(PYTHON) -m mypy
