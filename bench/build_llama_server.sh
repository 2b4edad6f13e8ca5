#!/usr/bin/env bash
# Build llama.cpp's C++ llama-server (the peer bench/edge_overhead.py measures) from the llama.cpp that
# our pinned llama-cpp-python vendors, so both run the same kernels. Source: the sdist from the package
# index; output: build/llama-server/bin/llama-server (git-ignored). About 8 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
version=$(.venv/bin/python -c "import importlib.metadata as m; print(m.version('llama-cpp-python'))")
work=build/llama-server
mkdir -p "$work/src"
.venv/bin/python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work/src"
tar -xzf "$work/src/llama_cpp_python-$version.tar.gz" -C "$work/src"
cmake -S "$work/src/llama_cpp_python-$version/vendor/llama.cpp" -B "$work" -DCMAKE_BUILD_TYPE=Release \
  -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF
cmake --build "$work" --target llama-server llama-bench -j "$(nproc)"
echo "built $work/bin/llama-server"
