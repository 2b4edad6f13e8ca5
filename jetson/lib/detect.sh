# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# Board and software detection: L4T/JetPack, CUDA, module, memory, free disk. Read-only.
#
# Why so careful: the usual failure is not a crash but a silently wrong install (a CPU-only
# llama.cpp, the 7B model on an 8 GB module). Every later choice is made from what is found
# here, and the installer refuses early and clearly on a machine it does not know.

L4T_VERSION=""      # e.g. 36.4.3
L4T_MAJOR=""        # 35 / 36
JETPACK_VERSION=""  # e.g. 6.2
CUDA_VERSION=""     # e.g. 12.6.68
CUDA_HOME=""
MODULE=""           # orin-nx-16gb / orin-nx-8gb / "" (unknown)
MODULE_NAME=""      # device tree model string
MEM_KB=0
CPU_COUNT=1
SUPPORTED=1
UNSUPPORTED_WHY=()

# "# R36 (release), REVISION: 4.3, GCID: ..." -> 36.4.3 ; "# R35 (release), REVISION: 4.1" -> 35.4.1
parse_nv_tegra_release() {
  sed -n 's/^# R\([0-9][0-9]*\) (release), REVISION: \([0-9][0-9.]*\),.*/\1.\2/p' "$1" | head -n 1
}

detect_l4t() {
  local rel
  rel=$(p /etc/nv_tegra_release)
  if [ -r "$rel" ]; then
    L4T_VERSION=$(parse_nv_tegra_release "$rel")
  fi
  if [ -z "$L4T_VERSION" ] && have dpkg-query; then
    # Version looks like 36.4.3-20250107174145
    L4T_VERSION=$(dpkg-query --showformat='${Version}' --show nvidia-l4t-core 2>/dev/null | sed 's/-.*//') || true
  fi
  L4T_MAJOR=${L4T_VERSION%%.*}
}

# L4T -> JetPack, from NVIDIA's JetPack archive release notes.
jetpack_for_l4t() {
  case "$1" in
    35.1|35.1.*) echo 5.0.2 ;;
    35.2.1*) echo 5.1 ;;
    35.3.1*) echo 5.1.1 ;;
    35.4.1*) echo 5.1.2 ;;
    35.5.0*) echo 5.1.3 ;;
    35.6.0*) echo 5.1.4 ;;
    35.6.1*) echo 5.1.5 ;;
    35.*) echo 5.x ;;
    36.2|36.2.*) echo 6.0-DP ;;
    36.3|36.3.*) echo 6.0 ;;
    36.4|36.4.0*) echo 6.1 ;;
    36.4.3*) echo 6.2 ;;
    36.4.4*) echo 6.2.1 ;;
    36.*) echo 6.x ;;
    *) echo unknown ;;
  esac
}

# Supported: JetPack 5.1.1+ (L4T R35.3.1+, the first with both Orin NX modules in production)
# and JetPack 6.0 GA+ (L4T R36.3+). Developer previews and JetPack 7 are refused.
l4t_supported() {
  local major minor rest
  major=${1%%.*}; rest=${1#*.}; minor=${rest%%.*}
  case "$major" in
    35) [ "${minor:-0}" -ge 3 ] ;;
    36) [ "${minor:-0}" -ge 3 ] ;;
    *) return 1 ;;
  esac
}

# /usr/local/cuda/version.json: {"cuda" : {"name" : "CUDA SDK", "version" : "12.6.68"}, ...}
parse_cuda_version_json() {
  sed -n '/"cuda"[[:space:]]*:/,/}/s/.*"version"[[:space:]]*:[[:space:]]*"\([0-9.]*\)".*/\1/p' "$1" | head -n 1
}

detect_cuda() {
  local home
  home=$(p /usr/local/cuda)
  CUDA_HOME=$home
  if [ -r "$home/version.json" ]; then
    CUDA_VERSION=$(parse_cuda_version_json "$home/version.json")
  fi
  if [ -z "$CUDA_VERSION" ] && [ -x "$home/bin/nvcc" ]; then
    CUDA_VERSION=$("$home/bin/nvcc" --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\),.*/\1/p' | head -n 1) || true
  fi
}

# Orin NX 16 GB is P3767-0000, 8 GB is P3767-0001 (the device tree "compatible" names the SKU);
# the model string alone does not say the size, so memory decides when the SKU is absent.
detect_module() {
  local model_file compat_file compat=""
  model_file=$(p /proc/device-tree/model)
  compat_file=$(p /proc/device-tree/compatible)
  if [ -r "$model_file" ]; then MODULE_NAME=$(tr -d '\0' <"$model_file"); fi
  if [ -r "$compat_file" ]; then compat=$(tr '\0' ' ' <"$compat_file"); fi
  MEM_KB=$(sed -n 's/^MemTotal:[[:space:]]*\([0-9]*\) kB/\1/p' "$(p /proc/meminfo)" 2>/dev/null | head -n 1) || true
  MEM_KB=${MEM_KB:-0}
  count_cpus
  case "$compat" in
    *p3767-0000*) MODULE=orin-nx-16gb; return ;;
    *p3767-0001*) MODULE=orin-nx-8gb; return ;;
  esac
  case "$MODULE_NAME" in
    *"Orin NX"*)
      # A 16 GB module reports ~15.3 GiB, an 8 GB one ~7.4 GiB.
      if [ "$MEM_KB" -gt $((12 * 1024 * 1024)) ]; then MODULE=orin-nx-16gb; else MODULE=orin-nx-8gb; fi ;;
    *) MODULE="" ;;
  esac
}

# Online cores: /proc/cpuinfo lists only those, and a lower power mode keeps some offline, so
# this is counted again after the power mode is set (before the build's jobs and n_threads).
count_cpus() {
  CPU_COUNT=$(grep -c '^processor' "$(p /proc/cpuinfo)" 2>/dev/null) || CPU_COUNT=0
  [ "$CPU_COUNT" -gt 0 ] || CPU_COUNT=$(nproc 2>/dev/null || echo 1)
}

# Free space in MB on the filesystem that will hold PATH (its nearest existing parent).
free_mb() {
  local dir=$1
  while [ ! -d "$dir" ] && [ "$dir" != "/" ] && [ -n "$dir" ]; do dir=$(dirname "$dir"); done
  df -Pk "${dir:-/}" 2>/dev/null | awk 'NR==2 {print int($4/1024)}'
}

detect_all() {
  detect_l4t
  detect_cuda
  detect_module
  if [ -z "$L4T_VERSION" ]; then
    SUPPORTED=0
    UNSUPPORTED_WHY+=("not a Jetson: no $(p /etc/nv_tegra_release) and no nvidia-l4t-core package")
    JETPACK_VERSION=none
  else
    JETPACK_VERSION=$(jetpack_for_l4t "$L4T_VERSION")
    if ! l4t_supported "$L4T_VERSION"; then
      SUPPORTED=0
      UNSUPPORTED_WHY+=("L4T $L4T_VERSION (JetPack $JETPACK_VERSION) is not supported: need JetPack 5.1.1+ (R35.3.1+) or 6.0+ (R36.3+)")
    fi
  fi
  if [ -z "$MODULE" ]; then
    SUPPORTED=0
    UNSUPPORTED_WHY+=("module '${MODULE_NAME:-unknown}' is not a Jetson Orin NX 8 GB / 16 GB")
  fi
}

print_detection() {
  say "  board:     ${MODULE_NAME:-unknown} -> ${MODULE:-unsupported}"
  say "  memory:    $((MEM_KB / 1024)) MB, $CPU_COUNT CPU cores online now"
  say "  L4T:       ${L4T_VERSION:-none} (JetPack ${JETPACK_VERSION:-none})"
  say "  CUDA:      ${CUDA_VERSION:-not found} at $CUDA_HOME"
}
