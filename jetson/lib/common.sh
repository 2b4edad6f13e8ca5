# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# Shared helpers for jetson/setup.sh: output, the dry-run switch, the root prefix, state.
#
# Why every path goes through `p`: the tests run the whole installer against a fake root
# folder (EDGECLOUD_SETUP_ROOT) with fake board files and fake commands first on PATH, so
# nothing here may name an absolute path without the prefix.
# Why every change goes through `run` / `put_file` / `state_set`: --dry-run must print every
# step and change nothing, and a second run must change nothing; funnelling changes through
# three helpers makes both true by construction.

ROOT="${EDGECLOUD_SETUP_ROOT:-/}"
ROOT="${ROOT%/}"          # "" for the real root, so p /etc -> /etc
DRY_RUN=0
ASSUME_YES=0
FILE_CHANGED=0            # set by put_file: 1 when the file's content changed (or would)
STATE_FILE_REL=/var/lib/edgecloud-setup/state

p() { printf '%s%s' "$ROOT" "$1"; }

say()  { printf '%s\n' "$*"; }
step() { printf '\n==> %s\n' "$*"; }
ok()   { printf '  ok: %s\n' "$*"; }
warn() { printf 'WARNING: %s\n' "$*" >&2; }
die()  { printf 'ERROR: %s\n' "$1" >&2; exit "${2:-1}"; }

# Print a command the way a shell would read it back.
show_cmd() {
  local out="" a
  for a in "$@"; do
    if [[ "$a" =~ ^[A-Za-z0-9_./:=@%+,-]+$ ]]; then out+=" $a"; else out+=" $(printf '%q' "$a")"; fi
  done
  printf '%s' "${out# }"
}

# Run a command that changes the system; in dry-run only print it.
run() {
  if [ "$DRY_RUN" = 1 ]; then
    printf '  [dry-run] %s\n' "$(show_cmd "$@")"
    return 0
  fi
  printf '  + %s\n' "$(show_cmd "$@")"
  "$@"
}

# Same as run, with extra environment given as NAME=VALUE words before the command.
run_env() {
  local envs=()
  while [ "$#" -gt 0 ] && [[ "$1" == *=* ]]; do envs+=("$1"); shift; done
  if [ "$DRY_RUN" = 1 ]; then
    printf '  [dry-run] %s %s\n' "$(show_cmd "${envs[@]}")" "$(show_cmd "$@")"
    return 0
  fi
  printf '  + %s %s\n' "$(show_cmd "${envs[@]}")" "$(show_cmd "$@")"
  env "${envs[@]}" "$@"
}

# put_file DEST MODE [OWNER:GROUP] < content. Writes only when the content differs.
put_file() {
  local dest=$1 mode=$2 owner=${3:-} tmp
  tmp=$(mktemp)
  cat >"$tmp"
  if [ -f "$dest" ] && cmp -s "$tmp" "$dest"; then
    rm -f "$tmp"
    FILE_CHANGED=0
    ok "$dest unchanged"
    return 0
  fi
  FILE_CHANGED=1
  if [ "$DRY_RUN" = 1 ]; then
    printf '  [dry-run] write %s (mode %s)\n' "$dest" "$mode"
    rm -f "$tmp"
    return 0
  fi
  printf '  + write %s (mode %s)\n' "$dest" "$mode"
  mkdir -p "$(dirname "$dest")"
  chmod "$mode" "$tmp"
  if [ -n "$owner" ] && [ -z "$ROOT" ]; then chown "$owner" "$tmp"; fi
  mv -f "$tmp" "$dest"
}

# Installer state: what this script changed, so --uninstall undoes exactly that.
state_get() {
  local f
  f=$(p "$STATE_FILE_REL")
  [ -f "$f" ] || return 0
  sed -n "s/^$1=//p" "$f" | tail -n 1
}

state_set() {
  local key=$1 value=$2 f
  f=$(p "$STATE_FILE_REL")
  if [ "$(state_get "$key")" = "$value" ]; then return 0; fi
  if [ "$DRY_RUN" = 1 ]; then
    printf '  [dry-run] record %s=%s in %s\n' "$key" "$value" "$f"
    return 0
  fi
  mkdir -p "$(dirname "$f")"
  touch "$f"
  { grep -v "^$key=" "$f" || true; printf '%s=%s\n' "$key" "$value"; } >"$f.tmp"
  mv -f "$f.tmp" "$f"
}

have() { command -v "$1" >/dev/null 2>&1; }

# Ask before changing a machine, unless --yes (or --dry-run, which changes nothing).
confirm() {
  [ "$ASSUME_YES" = 1 ] && return 0
  [ "$DRY_RUN" = 1 ] && return 0
  if [ ! -t 0 ]; then die "not a terminal: re-run with --yes to proceed without a prompt" 2; fi
  local answer
  read -r -p "$1 [y/N] " answer
  case "$answer" in y|Y|yes|YES) return 0 ;; *) die "aborted by the operator" 1 ;; esac
}
