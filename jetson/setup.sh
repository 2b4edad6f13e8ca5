#!/usr/bin/env bash
# shellcheck source-path=SCRIPTDIR
# One command from a freshly flashed Jetson Orin NX (JetPack 5.1.1+ or 6.x) to a running, tuned
# edgecloud gateway with the model on the GPU. Idempotent: a second run changes nothing.
# Read jetson/README.md first; run `sudo jetson/setup.sh --dry-run` to see every step.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# The project to install into the venv (the checkout this script lives in, unless overridden).
PROJECT_DIR=${EDGECLOUD_PROJECT_DIR:-$(cd "$HERE/.." && pwd)}
# The model pins (a site may keep its own list, e.g. with a verified mirror URL).
MODELS_CONF=${EDGECLOUD_MODELS_CONF:-$HERE/models.conf}

# shellcheck source=lib/common.sh
. "$HERE/lib/common.sh"
# shellcheck source=lib/detect.sh
. "$HERE/lib/detect.sh"
# shellcheck source=lib/install.sh
. "$HERE/lib/install.sh"
# shellcheck source=lib/model.sh
. "$HERE/lib/model.sh"
# shellcheck source=lib/tune.sh
. "$HERE/lib/tune.sh"
# shellcheck source=lib/service.sh
. "$HERE/lib/service.sh"
# shellcheck source=lib/report.sh
. "$HERE/lib/report.sh"
# shellcheck source=lib/uninstall.sh
. "$HERE/lib/uninstall.sh"

PREFIX=/opt/edgecloud
FORCE=0
UNINSTALL=0
OPT_PURGE=0
OPT_MODEL=""
OPT_MODEL_URL=""
OPT_MODEL_SHA256=""
OPT_BUNDLE=""
OPT_TRUSTED_ROOT=""
OPT_TRUST_BUNDLE_ROOT=0
OPT_POWER_MODE=MAXN
OPT_NO_SWAP=0
OPT_NO_ZRAM=0
OPT_TEXT_MODE=0
OPT_SWAP_SIZE=""
OPT_N_CTX=""
OPT_PORT=""
OPT_PYTHON=""
OPT_REBOOT=0
OPT_JETSON_CLOCKS=0
OPT_WHEELHOUSE=""
OPT_MODEL_FILE=""
OPT_MIN_TPS=""
ORT_INDEX=""
READY_TIMEOUT=600
EXIT_REBOOT=3
ORIG_ARGS=()

usage() {
  cat <<'EOF'
Usage: sudo jetson/setup.sh [options]

Turns a Jetson Orin NX (8 or 16 GB, JetPack 5.1.1+ or 6.x) into a running edgecloud gateway:
system packages, a system user, a venv with llama-cpp-python built for CUDA (sm_87), the model
(sha256-checked), swap and the power mode first, /etc/edgecloud/config.toml, a hardened
systemd service (Type=notify, watchdog), a GPU proof run as the service runs, and a closing health
report that fails on CPU fallback, an idle GPU or tokens/s under the model's floor.

  --dry-run               print every step it would take; change nothing
  --yes                   do not ask for confirmation
  --model NAME            a model from jetson/models.conf instead of the module's default
  --model-url URL         download this GGUF instead (needs --model-sha256)
  --model-sha256 HEX      expected sha256 of --model-url
  --bundle DIR|URL        install the model through the signed-bundle path
                          (edgecloud models update); DIR = a published TUF repository
  --trusted-root FILE     TUF root for --bundle: one that came with the device, not with the bundle
  --trust-bundle-root     trust on first use: take the root found inside the --bundle DIR itself
                          (only for media you made and carried yourself)
  --power-mode MODE       nvpmodel mode name or id (default MAXN; MAXN_SUPER where present)
  --reboot                if the power mode needs a reboot, reboot and resume by itself
                          (default: stop before building and say what to do)
  --jetson-clocks         pin the clocks at their maximum at every boot (edgecloud-tune.service)
  --wheelhouse DIR        install Python packages only from DIR (jetson/build-wheelhouse.sh):
                          no compiler, no network, hashes checked
  --model-file PATH       copy a model file brought on a drive (its sha256 must match the pin)
  --min-tokens-per-s N    fail the health report under N decode tokens/s (default: per model and
                          module from jetson/floors.conf; 0 turns the check off)
  --no-swap               do not create a swap file
  --no-zram               turn JetPack's zram swap off (nvzramconfig.service)
  --text-mode             boot to text mode instead of the desktop (frees ~800 MB)
  --swap-size SIZE        swap file size (default from jetson/profiles.conf, e.g. 8G)
  --n-ctx N               context size (default by module)
  --port N                gateway port in a new config (default 8080; bound to 127.0.0.1)
  --python BIN            Python for the venv (default python3.10)
  --ort-index URL|none    a mirror holding the pinned onnxruntime-gpu wheel (default: the Jetson
                          AI Lab URL in jetson/locks/onnxruntime-gpu.conf); none: CPU provider
  --prefix DIR            install root for the venv and models (default /opt/edgecloud)
  --force                 continue on an unsupported board/JetPack or low disk
  --uninstall             remove what setup.sh installed and revert its tuning
  --resume                (edgecloud-setup-resume.service) continue with the options saved by --reboot
  --purge                 with --uninstall: also remove /etc/edgecloud and /var/lib/edgecloud
  -h, --help              this text
EOF
}

need_arg() { [ "$#" -ge 2 ] && [ -n "$2" ] || die "$1 needs a value" 2; }

parse_args() {
  while [ "$#" -gt 0 ]; do
    case "$1" in
      --dry-run) DRY_RUN=1 ;;
      --yes|-y) ASSUME_YES=1 ;;
      --model) need_arg "$@"; OPT_MODEL=$2; shift ;;
      --model-url) need_arg "$@"; OPT_MODEL_URL=$2; shift ;;
      --model-sha256) need_arg "$@"; OPT_MODEL_SHA256=$2; shift ;;
      --bundle) need_arg "$@"; OPT_BUNDLE=$2; shift ;;
      --trusted-root) need_arg "$@"; OPT_TRUSTED_ROOT=$2; shift ;;
      --trust-bundle-root) OPT_TRUST_BUNDLE_ROOT=1 ;;
      --power-mode) need_arg "$@"; OPT_POWER_MODE=$2; shift ;;
      --reboot) OPT_REBOOT=1 ;;
      --jetson-clocks) OPT_JETSON_CLOCKS=1 ;;
      --wheelhouse) need_arg "$@"; OPT_WHEELHOUSE=${2%/}; shift ;;
      --model-file) need_arg "$@"; OPT_MODEL_FILE=$2; shift ;;
      --min-tokens-per-s) need_arg "$@"; OPT_MIN_TPS=$2; shift ;;
      --no-swap) OPT_NO_SWAP=1 ;;
      --no-zram) OPT_NO_ZRAM=1 ;;
      --text-mode) OPT_TEXT_MODE=1 ;;
      --swap-size) need_arg "$@"; OPT_SWAP_SIZE=$2; shift ;;
      --n-ctx) need_arg "$@"; OPT_N_CTX=$2; shift ;;
      --port) need_arg "$@"; OPT_PORT=$2; shift ;;
      --python) need_arg "$@"; OPT_PYTHON=$2; shift ;;
      --ort-index) need_arg "$@"; ORT_INDEX=$2; shift ;;
      --prefix) need_arg "$@"; PREFIX=${2%/}; shift ;;
      --force) FORCE=1 ;;
      --uninstall) UNINSTALL=1 ;;
      --purge) OPT_PURGE=1 ;;
      -h|--help) usage; exit 0 ;;
      *) usage >&2; die "unknown option: $1" 2 ;;
    esac
    shift
  done
  [[ "$PREFIX" == /* ]] || die "--prefix must be an absolute path" 2
  if [ -n "$OPT_MODEL_URL" ] && [ -n "$OPT_BUNDLE" ]; then die "--model-url and --bundle exclude each other" 2; fi
  if [ -n "$OPT_MODEL_SHA256" ] && [ -z "$OPT_MODEL_URL" ]; then die "--model-sha256 goes with --model-url" 2; fi
  if [ -n "$OPT_BUNDLE" ] && [ -z "$OPT_TRUSTED_ROOT" ]; then
    [ -d "$OPT_BUNDLE" ] || die "--bundle URL needs --trusted-root ROOT_JSON (a root that came with the device, not from the network)" 2
    [ "$OPT_TRUST_BUNDLE_ROOT" = 1 ] || die "--bundle DIR needs --trusted-root ROOT_JSON (a root that came with the device), or --trust-bundle-root to trust the root inside DIR on first use" 2
  fi
  if [ -n "$OPT_N_CTX" ] && ! [[ "$OPT_N_CTX" =~ ^[0-9]+$ ]]; then die "--n-ctx must be a number" 2; fi
  if [ -n "$OPT_PORT" ] && ! [[ "$OPT_PORT" =~ ^[0-9]+$ ]]; then die "--port must be a number" 2; fi
  if [ -n "$OPT_MIN_TPS" ] && ! [[ "$OPT_MIN_TPS" =~ ^[0-9]+([.][0-9]+)?$ ]]; then die "--min-tokens-per-s must be a number" 2; fi
  if [ -n "$OPT_WHEELHOUSE" ]; then
    [ -f "$OPT_WHEELHOUSE/requirements.lock" ] || die "--wheelhouse $OPT_WHEELHOUSE has no requirements.lock (made by jetson/build-wheelhouse.sh)" 2
    OPT_WHEELHOUSE=$(cd "$OPT_WHEELHOUSE" && pwd)
  fi
  if [ -n "$OPT_MODEL_FILE" ]; then
    [ -f "$OPT_MODEL_FILE" ] || die "--model-file $OPT_MODEL_FILE not found" 2
    if [ -n "$OPT_MODEL_URL" ] || [ -n "$OPT_BUNDLE" ]; then die "--model-file excludes --model-url and --bundle" 2; fi
  fi
}

# --resume (from edgecloud-setup-resume.service after a --reboot): the options saved before the
# reboot. The unit goes first, so a resumed run that fails cannot repeat at every boot.
resume_args() {
  local args_file
  args_file=$(p /var/lib/edgecloud-setup/resume-args)
  [ -f "$args_file" ] || die "--resume: no saved options in $args_file" 2
  RESUMED_ARGS=()
  while IFS= read -r -d '' arg; do RESUMED_ARGS+=("$arg"); done <"$args_file"
  remove_resume_unit
  rm -f "$args_file"
}

require_root() {
  # Under a test root (EDGECLOUD_SETUP_ROOT) nothing outside that folder is touched.
  if [ -z "$ROOT" ] && [ "$DRY_RUN" = 0 ] && [ "$(id -u)" != 0 ]; then
    die "run as root: sudo $0 $*" 2
  fi
}

main() {
  # Root may run with a strict umask; the service user must still read the venv and the model.
  umask 022
  if [ "${1:-}" = --resume ]; then
    resume_args
    set -- "${RESUMED_ARGS[@]}"
    say "Resuming after the reboot with: ${*}"
  fi
  ORIG_ARGS=("$@")
  parse_args "$@"
  require_root "$@"
  [ "$DRY_RUN" = 1 ] && say "DRY RUN: printing every step; nothing will be changed."

  if [ "$UNINSTALL" = 1 ]; then
    confirm "Remove edgecloud from this board?"
    uninstall
    return
  fi

  step "Detecting the board"
  detect_all
  print_detection
  if [ "$SUPPORTED" = 0 ]; then
    local why
    for why in "${UNSUPPORTED_WHY[@]}"; do warn "$why"; done
    if [ "$FORCE" = 1 ]; then
      warn "continuing anyway (--force)"
      [ -n "$MODULE" ] || MODULE=orin-nx-8gb
    else
      die "refusing to install on this machine (use --force to override)" 2
    fi
  fi
  PYTHON_BIN=${OPT_PYTHON:-python3.10}
  select_model
  print_model_choice
  check_disk
  [ -z "$OPT_WHEELHOUSE" ] || check_wheelhouse
  confirm "Install edgecloud into $PREFIX and tune this board?"

  # Tuning first: the CUDA build needs the swap, and the power mode brings the cores online that
  # the build jobs and n_threads are counted from.
  step "Tuning the device"
  tune_device
  count_cpus
  if [ "$DRY_RUN" = 1 ]; then
    say "  cores:     counted again here, once the power mode is set (now $CPU_COUNT online)"
  else
    say "  cores:     $CPU_COUNT online in power mode ${POWER_MODE_NAME:-?} (build jobs and n_threads)"
  fi
  step "System packages"
  install_packages
  step "Service user"
  ensure_user
  step "Python environment and the CUDA build of llama.cpp"
  ensure_venv
  ensure_llama_cuda
  ensure_project
  ensure_onnxruntime
  step "Model"
  ensure_model
  step "Configuration and service unit"
  write_config
  write_service_unit
  step "Proving the GPU is used, as the service runs"
  gpu_proof
  step "Starting the service"
  start_service
  wait_ready
  health_report
  say ""
  if [ "$DRY_RUN" = 1 ]; then say "Dry run complete: nothing was changed."; else say "Done."; fi
}

main "$@"
