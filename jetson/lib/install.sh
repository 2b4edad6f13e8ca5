# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# System packages, the service user, the virtual environment, the CUDA build of
# llama-cpp-python, the project itself, and onnxruntime (GPU provider where a wheel exists).
#
# Why the order matters: the project depends on llama-cpp-python; installing the project first
# would make pip build a CPU-only llama.cpp from PyPI's source package. So the CUDA build
# comes first, pinned to the project's version, and the project install finds it satisfied.

SERVICE_USER=edgecloud
VENV=""
PYTHON_BIN=""
LLAMA_VERSION=""
ORT_KIND=""          # gpu / cpu, for the report
ORT_NOTE=""

# The installed ones among the given packages, one per line (one dpkg-query for all of them).
pkgs_installed() {
  # shellcheck disable=SC2016  # ${Package} ${Status} is dpkg-query's format, not shell
  dpkg-query -W -f='${Package} ${Status}\n' "$@" 2>/dev/null | awk '/ install ok installed$/ {print $1}' || true
}

pkg_installed() { pkgs_installed "$1" | grep -qx "$1"; }

install_packages() {
  local wanted=(build-essential cmake git curl ca-certificates "$PYTHON_BIN" "$PYTHON_BIN-venv" "$PYTHON_BIN-dev")
  local missing=() pkg need_ppa=0 present
  if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then wanted+=(nvidia-cuda-dev); fi
  present=$(pkgs_installed "${wanted[@]}")
  for pkg in "${wanted[@]}"; do grep -qx "$pkg" <<<"$present" || missing+=("$pkg"); done
  if [ "${#missing[@]}" -eq 0 ]; then ok "system packages present: ${wanted[*]}"; return; fi
  # JetPack 5 is Ubuntu 20.04 with Python 3.8; the gateway needs 3.10 (deadsnakes PPA).
  if [ "$L4T_MAJOR" = 35 ] && [[ " ${missing[*]} " == *" $PYTHON_BIN "* ]]; then need_ppa=1; fi
  run apt-get update
  if [ "$need_ppa" = 1 ]; then
    pkg_installed software-properties-common || \
      run_env DEBIAN_FRONTEND=noninteractive apt-get install -y software-properties-common
    run add-apt-repository -y ppa:deadsnakes/ppa   # also refreshes the package lists
  fi
  run_env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}"
  # JetPack's CUDA may have just arrived (nvidia-cuda-dev): read its version again.
  detect_cuda
}

ensure_user() {
  if getent passwd "$SERVICE_USER" >/dev/null 2>&1; then
    ok "system user $SERVICE_USER exists"
    return
  fi
  run useradd --system --user-group --groups video --home-dir /var/lib/edgecloud \
    --no-create-home --shell /usr/sbin/nologin "$SERVICE_USER"
  state_set user_created 1
}

# The CUDA toolchain, set explicitly: sudo and systemd both drop /usr/local/cuda/bin from PATH,
# and without nvcc (or without an architecture) CMake quietly builds for the CPU only.
cuda_build_env() {
  local jobs=$CPU_COUNT
  # nvcc needs ~1.5 GB per job: halve the jobs on an 8 GB module so the build is not OOM-killed.
  if [ "$MODULE" = orin-nx-8gb ]; then jobs=$(( (CPU_COUNT + 1) / 2 )); fi
  BUILD_ENV=(
    "CUDA_HOME=$CUDA_HOME"
    "CUDACXX=$CUDA_HOME/bin/nvcc"
    "PATH=$CUDA_HOME/bin:$PATH"
    "LD_LIBRARY_PATH=$CUDA_HOME/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    "CMAKE_ARGS=-DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=87 -DCMAKE_CUDA_COMPILER=$CUDA_HOME/bin/nvcc"
    "FORCE_CMAKE=1"
    "CMAKE_BUILD_PARALLEL_LEVEL=$jobs"
  )
}

ensure_venv() {
  VENV="$(p "$PREFIX")/venv"
  if [ -x "$VENV/bin/python" ]; then ok "virtual environment $VENV exists"; return; fi
  run mkdir -p "$(p "$PREFIX")"
  run "$PYTHON_BIN" -m venv "$VENV"
  run "$VENV/bin/python" -m pip install --upgrade pip wheel
}

# The llama-cpp-python version the project pins (pyproject.toml), so the CUDA build satisfies it.
project_llama_version() {
  sed -n 's/.*"llama-cpp-python==\([0-9][0-9.]*\)".*/\1/p' "$PROJECT_DIR/pyproject.toml" | head -n 1
}

llama_build_ok() {
  [ -x "$VENV/bin/python" ] || return 1
  local out
  out=$("$VENV/bin/python" "$HERE/gpu_check.py" --supports-only 2>/dev/null) || return 1
  grep -qx "llama_cpp_version=$LLAMA_VERSION" <<<"$out" && grep -qx 'gpu_offload=1' <<<"$out"
}

ensure_llama_cuda() {
  LLAMA_VERSION=$(project_llama_version)
  [ -n "$LLAMA_VERSION" ] || die "cannot read the llama-cpp-python pin from $PROJECT_DIR/pyproject.toml"
  if [ "$DRY_RUN" = 0 ] && llama_build_ok; then
    ok "llama-cpp-python $LLAMA_VERSION already built with CUDA (GPU offload supported)"
    return
  fi
  [ "$DRY_RUN" = 1 ] || [ -x "$CUDA_HOME/bin/nvcc" ] || \
    die "no CUDA compiler at $CUDA_HOME/bin/nvcc: install JetPack's CUDA (apt-get install nvidia-cuda-dev)"
  cuda_build_env
  # --no-binary/--no-cache-dir: never reuse a wheel built earlier without CUDA.
  run_env "${BUILD_ENV[@]}" "$VENV/bin/python" -m pip install --no-cache-dir --force-reinstall \
    --no-binary llama-cpp-python "llama-cpp-python==$LLAMA_VERSION"
  if [ "$DRY_RUN" = 1 ]; then return; fi
  if ! llama_build_ok; then
    "$VENV/bin/python" "$HERE/gpu_check.py" --supports-only || true
    die "llama-cpp-python built WITHOUT GPU offload: check nvcc ($CUDA_HOME/bin/nvcc) and the build log above"
  fi
  ok "llama-cpp-python $LLAMA_VERSION reports GPU offload support"
}

# A fingerprint of the project's sources, so a second run reinstalls only when they changed.
project_fingerprint() {
  (cd "$PROJECT_DIR" && find pyproject.toml edge cloud_bridge models -type f \
     \( -name '*.py' -o -name '*.toml' -o -name '*.json' -o -name '*.onnx' \) -print0 2>/dev/null \
     | sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-16) || true
}

ensure_project() {
  local fp stamp
  fp=$(project_fingerprint)
  stamp="$(p "$PREFIX")/.project-fingerprint"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fp" ]; then
    ok "edgecloud already installed from $PROJECT_DIR ($fp)"
    return
  fi
  run "$VENV/bin/python" -m pip install --no-cache-dir "$PROJECT_DIR"
  put_file "$stamp" 0644 < <(printf '%s\n' "$fp")
  SERVICE_DIRTY=1
}

# The Jetson AI Lab pip index (a PyPI mirror with CUDA wheels built for each JetPack).
ort_index_for() {
  case "$CUDA_VERSION" in
    12.6*) echo "https://pypi.jetson-ai-lab.io/jp6/cu126" ;;
    12.2*) echo "https://pypi.jetson-ai-lab.io/jp6/cu122" ;;
    11.4*) echo "https://pypi.jetson-ai-lab.io/jp5/cu114" ;;
    *) echo "" ;;
  esac
}

pip_has() { "$VENV/bin/python" -m pip show "$1" >/dev/null 2>&1; }

# onnxruntime and onnxruntime-gpu install the same `onnxruntime` module, so exactly one may be
# present; the project's dependency brings the CPU one, which is swapped for the GPU wheel.
ensure_onnxruntime() {
  local index=${ORT_INDEX-}
  [ -n "$index" ] || index=$(ort_index_for)
  if [ "$DRY_RUN" = 0 ] && pip_has onnxruntime-gpu && ! pip_has onnxruntime; then
    ORT_KIND=gpu; ORT_NOTE="onnxruntime-gpu already installed"
    ok "$ORT_NOTE"; return
  fi
  if [ "$index" = none ] || [ -z "$index" ]; then
    ORT_KIND=cpu; ORT_NOTE="no onnxruntime-gpu index for CUDA ${CUDA_VERSION:-?}: CPU provider"
  elif [ "$DRY_RUN" = 0 ] && [ "$(state_get ort_cpu_index)" = "$index" ]; then
    ORT_KIND=cpu; ORT_NOTE="no onnxruntime-gpu wheel at $index (checked on an earlier run): CPU provider"
  else
    local dl="<tmpdir>"
    [ "$DRY_RUN" = 1 ] || dl=$(mktemp -d)
    say "  trying onnxruntime-gpu from $index (the Jetson AI Lab pip index)"
    if [ "$DRY_RUN" = 1 ]; then
      run "$VENV/bin/python" -m pip download --no-deps --index-url "$index" --dest "$dl" onnxruntime-gpu
      run "$VENV/bin/python" -m pip uninstall -y onnxruntime
      run "$VENV/bin/python" -m pip install --no-deps --force-reinstall "$dl/onnxruntime_gpu-*.whl"
      ORT_KIND=gpu; ORT_NOTE="would install onnxruntime-gpu from $index (CPU onnxruntime if no wheel)"
    elif "$VENV/bin/python" -m pip download --no-deps --index-url "$index" --dest "$dl" onnxruntime-gpu \
         && compgen -G "$dl/onnxruntime_gpu-*.whl" >/dev/null; then
      if pip_has onnxruntime; then run "$VENV/bin/python" -m pip uninstall -y onnxruntime; fi
      run "$VENV/bin/python" -m pip install --no-deps --force-reinstall "$dl"/onnxruntime_gpu-*.whl
      ORT_KIND=gpu; ORT_NOTE="onnxruntime-gpu from $index"
      SERVICE_DIRTY=1
    else
      ORT_KIND=cpu; ORT_NOTE="no onnxruntime-gpu wheel for this JetPack/Python at $index: CPU provider"
      state_set ort_cpu_index "$index"
    fi
    [ "$DRY_RUN" = 1 ] || rm -rf "$dl"
  fi
  if [ "$ORT_KIND" = cpu ] && [ "$DRY_RUN" = 0 ] && ! pip_has onnxruntime; then
    run "$VENV/bin/python" -m pip install "onnxruntime>=1.18"
    SERVICE_DIRTY=1
  fi
  say "  onnxruntime: $ORT_NOTE"
}
