#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# Build once, install on a hundred boards: a wheelhouse for `jetson/setup.sh --wheelhouse DIR`.
#
# Run on one Jetson of the fleet's JetPack (or in a matching JetPack container, e.g. NVIDIA's
# l4t-jetpack image for the same L4T release) with network access. It writes to DIR:
#   - the llama-cpp-python wheel compiled here with CUDA for sm_87 (the 30-60 minute step);
#   - every wheel the locks in jetson/locks/ name for this Python (pip, wheel, the project's
#     dependencies), fetched with --require-hashes, so each matches the repository's pin;
#   - the pinned onnxruntime-gpu wheel for this CUDA, when jetson/locks/onnxruntime-gpu.conf has one;
#   - requirements.lock: all of them with their sha256 (the llama-cpp-python one computed here),
#     llama-cpp-python.lock: that wheel's line alone, and wheelhouse.conf: what it was built for.
# Copy DIR to each board (USB drive, rsync) and run `sudo jetson/setup.sh --wheelhouse DIR`: no
# compiler, no apt, no PyPI. The setup refuses a wheelhouse built for another JetPack, CUDA,
# Python or llama-cpp-python version.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PROJECT_DIR=${EDGECLOUD_PROJECT_DIR:-$(cd "$HERE/.." && pwd)}
OPT_WHEELHOUSE=""   # pip_install (lib/install.sh) fetches from the index here

# shellcheck source=lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source=lib/detect.sh
. "$HERE/lib/detect.sh"
# shellcheck source=lib/install.sh
. "$HERE/lib/install.sh"
# shellcheck source=lib/model.sh
. "$HERE/lib/model.sh"

usage() {
  cat <<'EOF'
Usage: jetson/build-wheelhouse.sh [--python BIN] [--dry-run] DIR

Builds llama-cpp-python with CUDA on this Jetson and collects every wheel setup.sh installs,
hash-checked against jetson/locks/, into DIR (about 250 MB).
EOF
}

main() {
  local out="" python=python3.10 work venv lock llama_whl sha line url ort_sha ort_file
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --python) [ "$#" -ge 2 ] || die "--python needs a value" 2; python=$2; shift ;;  # e.g. python3.10
      --dry-run) DRY_RUN=1 ;;
      -h|--help) usage; exit 0 ;;
      -*) usage >&2; die "unknown option: $1" 2 ;;
      *) out=$1 ;;
    esac
    shift
  done
  [ -n "$out" ] || { usage >&2; die "name the output folder" 2; }

  step "Detecting the board"
  detect_all
  print_detection
  [ -n "$L4T_VERSION" ] || die "not a Jetson (or a JetPack container): the CUDA wheel must be built on the target JetPack" 2
  [ -x "$CUDA_HOME/bin/nvcc" ] || die "no CUDA compiler at $CUDA_HOME/bin/nvcc (apt-get install nvidia-cuda-dev)" 2
  [ -n "$MODULE" ] || MODULE=orin-nx-8gb   # a container: be gentle with the build jobs
  LLAMA_VERSION=$(project_llama_version)
  [ "$(locked_llama_version)" = "$LLAMA_VERSION" ] || \
    die "jetson/locks/llama-cpp-python.txt pins $(locked_llama_version), pyproject.toml $LLAMA_VERSION: regenerate the lock"
  lock=$(lock_file)

  run mkdir -p "$out"
  out=$(cd "$out" 2>/dev/null && pwd || echo "$out")
  work=$(mktemp -d)
  venv="$work/venv"
  VENV=$venv
  step "A build venv with the locked tools"
  run "$python" -m venv "$venv"
  pip_install -r "$HERE/locks/bootstrap.txt"
  pip_install -r "$lock"

  step "Every locked wheel, hash-checked"
  run "$venv/bin/python" -m pip download --require-hashes --no-deps --only-binary :all: --dest "$out" \
    -r "$HERE/locks/bootstrap.txt" -r "$lock"

  step "llama-cpp-python $LLAMA_VERSION with CUDA (sm_87)"
  cuda_build_env
  run_env "${BUILD_ENV[@]}" "$venv/bin/python" -m pip wheel --require-hashes --no-deps --no-build-isolation \
    --no-cache-dir --no-binary llama-cpp-python --wheel-dir "$out" -r "$HERE/locks/llama-cpp-python.txt"

  line=$(conf_line "$HERE/locks/onnxruntime-gpu.conf" "${CUDA_VERSION%.*}")
  if [ -n "$line" ]; then
    step "The pinned onnxruntime-gpu"
    IFS='|' read -r _ url ort_sha <<<"$line"
    ort_file=$(basename "$url")
    if [ "$DRY_RUN" = 0 ]; then printf 'onnxruntime-gpu @ %s --hash=sha256:%s\n' "$url" "$ort_sha" >"$work/ort.txt"; fi
    run "$venv/bin/python" -m pip download --require-hashes --no-deps --dest "$out" -r "$work/ort.txt" || \
      warn "could not fetch $ort_file: boards installed from this wheelhouse keep the CPU onnxruntime"
  fi

  if [ "$DRY_RUN" = 1 ]; then say "Dry run complete: nothing was changed."; return; fi
  llama_whl=$(compgen -G "$out/llama_cpp_python-$LLAMA_VERSION-*.whl" | head -n 1) || true
  [ -n "$llama_whl" ] || die "the llama-cpp-python build left no wheel in $out"
  sha=$(sha256_of "$llama_whl")
  printf 'llama-cpp-python==%s --hash=sha256:%s\n' "$LLAMA_VERSION" "$sha" >"$out/llama-cpp-python.lock"
  {
    printf '# Written by jetson/build-wheelhouse.sh on %s (%s), L4T %s, CUDA %s.\n' \
      "${MODULE_NAME:-a JetPack container}" "$MODULE" "$L4T_VERSION" "$CUDA_VERSION"
    grep -v '^#' "$HERE/locks/bootstrap.txt"
    grep -v '^#' "$lock"
    cat "$out/llama-cpp-python.lock"
    if [ -n "$line" ] && [ -f "$out/${ort_file:-none}" ]; then printf 'onnxruntime-gpu @ file:%s --hash=sha256:%s\n' "$ort_file" "$ort_sha"; fi
  } >"$out/requirements.lock"
  {
    printf 'l4t_major=%s\njetpack=%s\ncuda=%s\npython=%s\nllama_cpp_python=%s\n' \
      "$L4T_MAJOR" "$JETPACK_VERSION" "${CUDA_VERSION%.*}" "${python#python}" "$LLAMA_VERSION"
  } >"$out/wheelhouse.conf"
  rm -rf "$work"
  ok "wheelhouse ready: $out ($(find "$out" -name '*.whl' | wc -l) wheels); llama-cpp-python sha256 $sha"
  say "Install on each board with: sudo jetson/setup.sh --yes --wheelhouse $out"
}

main "$@"
