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
  local wanted=("$PYTHON_BIN") missing=() pkg need_ppa=0 present
  if [ -n "$OPT_WHEELHOUSE" ]; then
    # Everything is prebuilt: no compiler, no CUDA headers, no download tool. python3.10-venv is
    # optional (a venv without pip is bootstrapped from the wheelhouse's pip wheel).
    :
  else
    wanted+=(build-essential cmake git curl ca-certificates "$PYTHON_BIN-venv" "$PYTHON_BIN-dev")
    if [ ! -x "$CUDA_HOME/bin/nvcc" ]; then wanted+=(nvidia-cuda-dev); fi
  fi
  present=$(pkgs_installed "${wanted[@]}")
  for pkg in "${wanted[@]}"; do grep -qx "$pkg" <<<"$present" || missing+=("$pkg"); done
  if [ "${#missing[@]}" -eq 0 ]; then ok "system packages present: ${wanted[*]}"; return; fi
  # JetPack 5 is Ubuntu 20.04 with Python 3.8; the gateway needs 3.10 (deadsnakes PPA).
  if [ "$L4T_MAJOR" = 35 ] && [[ " ${missing[*]} " == *" $PYTHON_BIN "* ]]; then need_ppa=1; fi
  run apt-get update || [ -z "$OPT_WHEELHOUSE" ] || \
    die "missing ${missing[*]} and apt cannot reach its sources: install them from a local apt mirror or an offline .deb set, then re-run"
  if [ "$need_ppa" = 1 ]; then
    pkg_installed software-properties-common || \
      run_env DEBIAN_FRONTEND=noninteractive apt-get install -y software-properties-common
    run add-apt-repository -y ppa:deadsnakes/ppa   # also refreshes the package lists
    state_set ppa_added deadsnakes
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

# Every pip call that fetches or installs a package goes through here: exact versions, hashes
# required, no dependency resolution (the lock files hold the whole closure), and with a
# wheelhouse nothing but its files. What runs as root is only ever what the locks name.
pip_install() {
  local src=()
  if [ -n "$OPT_WHEELHOUSE" ]; then src=(--no-index --find-links "$OPT_WHEELHOUSE"); fi
  run "$VENV/bin/python" -m pip install --require-hashes --no-deps "${src[@]}" "$@"
}

# jetson/locks/<jp5|jp6>-py310.txt: the project's runtime dependencies and the build tools, pinned
# with the sha256 of every file PyPI serves for them (regenerate: see jetson/locks/README.md).
lock_file() {
  local jp=jp6
  [ "$L4T_MAJOR" = 35 ] && jp=jp5
  printf '%s/locks/%s-py310.txt' "$HERE" "$jp"
}

ensure_venv() {
  VENV="$(p "$PREFIX")/venv"
  if [ -x "$VENV/bin/python" ]; then ok "virtual environment $VENV exists"; else
    run mkdir -p "$(p "$PREFIX")"
    if [ -n "$OPT_WHEELHOUSE" ] && ! pkg_installed "$PYTHON_BIN-venv"; then
      # No ensurepip without python3.10-venv: start without pip and run pip from its wheel.
      run "$PYTHON_BIN" -m venv --without-pip "$VENV"
      local pip_whl
      pip_whl=$(compgen -G "$OPT_WHEELHOUSE/pip-*.whl" | head -n 1) || true
      [ -n "$pip_whl" ] || die "the wheelhouse has no pip wheel to bootstrap the venv with"
      run "$VENV/bin/python" "$pip_whl/pip" install --require-hashes --no-deps --no-index \
        --find-links "$OPT_WHEELHOUSE" -r "$HERE/locks/bootstrap.txt"
    else
      run "$PYTHON_BIN" -m venv "$VENV"
    fi
    state_set bootstrap_lock ""
  fi
  ensure_locked "$HERE/locks/bootstrap.txt" bootstrap_lock "pip and wheel"
  ensure_locked "$(lock_file)" deps_lock "the project's dependencies and build tools"
}

# Install a lock file's exact, hashed packages once; again only when the lock file changes.
ensure_locked() {
  local lock=$1 key=$2 what=$3 sum
  sum=$(sha256_of "$lock")
  if [ "$DRY_RUN" = 0 ] && [ "$(state_get "$key")" = "$sum" ]; then ok "$what installed from $(basename "$lock")"; return; fi
  pip_install -r "$lock"
  state_set "$key" "$sum"
  SERVICE_DIRTY=1
}

# The llama-cpp-python version the project pins (pyproject.toml), so the CUDA build satisfies it.
project_llama_version() {
  sed -n 's/.*"llama-cpp-python==\([0-9][0-9.]*\)".*/\1/p' "$PROJECT_DIR/pyproject.toml" | head -n 1
}

# The same version in jetson/locks/llama-cpp-python.txt (the source package's sha256).
locked_llama_version() {
  sed -n 's/^llama-cpp-python==\([0-9][0-9.]*\).*/\1/p' "$HERE/locks/llama-cpp-python.txt" | head -n 1
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
  if [ -n "$OPT_WHEELHOUSE" ]; then
    # The CUDA wheel build-wheelhouse.sh compiled on a board of this JetPack, with its sha256.
    pip_install --force-reinstall -r "$OPT_WHEELHOUSE/llama-cpp-python.lock"
  else
    [ "$(locked_llama_version)" = "$LLAMA_VERSION" ] || \
      die "jetson/locks/llama-cpp-python.txt pins $(locked_llama_version), pyproject.toml $LLAMA_VERSION: regenerate the lock"
    [ "$DRY_RUN" = 1 ] || [ -x "$CUDA_HOME/bin/nvcc" ] || \
      die "no CUDA compiler at $CUDA_HOME/bin/nvcc: install JetPack's CUDA (apt-get install nvidia-cuda-dev)"
    cuda_build_env
    # The hashed source package, built here with CUDA: --no-binary/--no-cache-dir so no CPU wheel is
    # reused, --no-build-isolation so the build tools are the hashed ones from the lock.
    run_env "${BUILD_ENV[@]}" "$VENV/bin/python" -m pip install --require-hashes --no-deps --no-build-isolation \
      --no-cache-dir --force-reinstall --no-binary llama-cpp-python -r "$HERE/locks/llama-cpp-python.txt"
  fi
  if [ "$DRY_RUN" = 1 ]; then return; fi
  if ! llama_build_ok; then
    "$VENV/bin/python" "$HERE/gpu_check.py" --supports-only || true
    die "llama-cpp-python built WITHOUT GPU offload: check nvcc ($CUDA_HOME/bin/nvcc) and the build log above"
  fi
  SERVICE_DIRTY=1
  ok "llama-cpp-python $LLAMA_VERSION reports GPU offload support"
}

# A fingerprint of the project's sources, so a second run reinstalls only when they changed.
project_fingerprint() {
  (cd "$PROJECT_DIR" && find pyproject.toml edge cloud_bridge models -type f \
     \( -name '*.py' -o -name '*.c' -o -name '*.toml' -o -name '*.json' -o -name '*.onnx' \) -print0 2>/dev/null \
     | sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-16) || true
}

# The project from this checkout: its own code, nothing fetched (--no-index --no-deps; every
# dependency came from the hashed lock). pip cannot hash a local folder, the one exception.
ensure_project() {
  local fp stamp
  fp=$(project_fingerprint)
  stamp="$(p "$PREFIX")/.project-fingerprint"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$fp" ]; then
    ok "edgecloud already installed from $PROJECT_DIR ($fp)"
    return
  fi
  run "$VENV/bin/python" -m pip install --no-index --no-deps --no-build-isolation --no-cache-dir "$PROJECT_DIR"
  put_file "$stamp" 0644 < <(printf '%s\n' "$fp")
  SERVICE_DIRTY=1
}

# --wheelhouse DIR must match this board: JetPack (L4T major), CUDA, Python, llama-cpp-python.
check_wheelhouse() {
  local conf key want got problems=()
  conf="$OPT_WHEELHOUSE/wheelhouse.conf"
  [ -f "$conf" ] || die "--wheelhouse $OPT_WHEELHOUSE has no wheelhouse.conf (made by jetson/build-wheelhouse.sh)" 2
  for key in l4t_major cuda python llama_cpp_python; do
    got=$(sed -n "s/^$key=//p" "$conf" | head -n 1)
    case "$key" in
      l4t_major) want=$L4T_MAJOR ;;
      cuda) want=${CUDA_VERSION%.*} ;;
      python) want=${PYTHON_BIN#python} ;;
      llama_cpp_python) want=$(project_llama_version) ;;
    esac
    [ "$got" = "$want" ] || problems+=("$key: wheelhouse $got, this board/checkout $want")
  done
  if [ "${#problems[@]}" -gt 0 ]; then
    for key in "${problems[@]}"; do warn "$key"; done
    die "the wheelhouse $OPT_WHEELHOUSE was built for another board or checkout: rebuild it with jetson/build-wheelhouse.sh" 2
  fi
  say "  wheelhouse: $OPT_WHEELHOUSE (JetPack $(sed -n 's/^jetpack=//p' "$conf"), CUDA ${CUDA_VERSION%.*}, llama-cpp-python $(project_llama_version))"
}

# jetson/locks/onnxruntime-gpu.conf: the GPU wheel for this CUDA, as a URL and its sha256.
ort_pin() { conf_line "$HERE/locks/onnxruntime-gpu.conf" "${CUDA_VERSION%.*}"; }

pip_has() { "$VENV/bin/python" -m pip show "$1" >/dev/null 2>&1; }

# onnxruntime and onnxruntime-gpu install the same `onnxruntime` module, so exactly one may be
# present; the lock brings the CPU one, which is swapped for the pinned GPU wheel when this CUDA
# has one. Nothing is recorded when that fails: a board installed offline tries again on the
# next run of this script (with the network, or with a wheelhouse that holds the wheel).
ensure_onnxruntime() {
  local line url sha file dl req
  if [ "$DRY_RUN" = 0 ] && pip_has onnxruntime-gpu && ! pip_has onnxruntime; then
    ORT_KIND=gpu; ORT_NOTE="onnxruntime-gpu already installed"
    ok "$ORT_NOTE"; return
  fi
  line=$(ort_pin)
  if [ "$ORT_INDEX" = none ] || [ -z "$line" ]; then
    ORT_KIND=cpu; ORT_NOTE="no pinned onnxruntime-gpu wheel for CUDA ${CUDA_VERSION:-?}: CPU provider"
    say "  onnxruntime: $ORT_NOTE"
    return
  fi
  IFS='|' read -r _ url sha <<<"$line"
  file=$(basename "$url")
  if [ -n "$ORT_INDEX" ]; then url="${ORT_INDEX%/}/$file"; fi   # a mirror holding the same file
  if [ -n "$OPT_WHEELHOUSE" ]; then url="file://$OPT_WHEELHOUSE/$file"; fi
  dl="<tmpdir>"
  [ "$DRY_RUN" = 1 ] || dl=$(mktemp -d)
  req="$dl/onnxruntime-gpu.txt"
  say "  trying the pinned onnxruntime-gpu ($file, sha256 ${sha:0:12}…)"
  [ "$DRY_RUN" = 1 ] || printf 'onnxruntime-gpu @ %s --hash=sha256:%s\n' "$url" "$sha" >"$req"
  if [ "$DRY_RUN" = 1 ]; then
    run "$VENV/bin/python" -m pip download --require-hashes --no-deps --dest "$dl" -r "$req"
    run "$VENV/bin/python" -m pip uninstall -y onnxruntime
    pip_install --force-reinstall -r "$req"
    ORT_KIND=gpu; ORT_NOTE="would install the pinned onnxruntime-gpu (CPU onnxruntime if it cannot be fetched)"
  elif run "$VENV/bin/python" -m pip download --require-hashes --no-deps --dest "$dl" -r "$req" \
       && [ -f "$dl/$file" ]; then
    printf 'onnxruntime-gpu @ file://%s --hash=sha256:%s\n' "$dl/$file" "$sha" >"$req"
    if pip_has onnxruntime; then run "$VENV/bin/python" -m pip uninstall -y onnxruntime; fi
    # --force-reinstall: both wheels write the same module files; removing the CPU one removed them.
    if pip_install --force-reinstall -r "$req"; then
      ORT_KIND=gpu; ORT_NOTE="onnxruntime-gpu $file (pinned, sha256 checked)"
    else
      pip_install -r "$(lock_file)"   # puts the CPU onnxruntime back
      ORT_KIND=cpu; ORT_NOTE="onnxruntime-gpu $file did not install: CPU provider"
      warn "$ORT_NOTE"
    fi
    SERVICE_DIRTY=1
  else
    ORT_KIND=cpu
    ORT_NOTE="the pinned onnxruntime-gpu could not be fetched (offline, or its hash no longer matches): CPU provider for now; re-run this script online to try again"
    warn "$ORT_NOTE"
  fi
  [ "$DRY_RUN" = 1 ] || rm -rf "$dl"
  say "  onnxruntime: $ORT_NOTE"
}
