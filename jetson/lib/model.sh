# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# Model choice by module, download with resume, sha256 check, or the signed-bundle path.
#
# Why the hash is checked on every run: a 4.7 GB file interrupted at the wrong moment, or
# replaced on disk, must never be served; sha256 of the whole file costs ~15 s on an Orin's
# NVMe, once per installer run.

MODEL_NAME=""
MODEL_FILE=""
MODEL_URL=""
MODEL_SHA256=""
MODEL_SIZE_MB=0
MODEL_QUANT=""
MODEL_PATH=""        # final path on the device (without the test root)
FLEET_HARDWARE=""    # the fleet's hardware name for this module, e.g. jetson-orin-nx-16gb
N_CTX=""
N_BATCH=""
PARALLEL=""
MEMORY_MAX=""
MEMORY_HIGH=""
SWAP_SIZE=""

# conf_line FILE KEY -> the first non-comment line whose first field is KEY
conf_line() { grep -v '^[[:space:]]*#' "$1" | grep -m 1 "^$2|" || true; }

load_profile() {
  local line
  line=$(conf_line "$HERE/profiles.conf" "$MODULE")
  [ -n "$line" ] || die "no profile for module '$MODULE' in $HERE/profiles.conf" 2
  IFS='|' read -r _ profile_model profile_ctx profile_batch MEMORY_MAX SWAP_SIZE profile_parallel <<<"$line"
  # The soft limit sits 1 GB under the hard one: the kernel reclaims before it kills.
  MEMORY_HIGH="$(( ${MEMORY_MAX%G} - 1 ))G"
  N_CTX=${OPT_N_CTX:-$profile_ctx}
  N_BATCH=$profile_batch
  PARALLEL=${profile_parallel:-1}
  if [ -n "$OPT_SWAP_SIZE" ]; then SWAP_SIZE=$OPT_SWAP_SIZE; fi
  MODEL_NAME=${OPT_MODEL:-$profile_model}
  FLEET_HARDWARE="jetson-$MODULE"
  load_floor
}

# The decode floor the health report enforces (jetson/floors.conf; --min-tokens-per-s overrides).
MIN_TPS=""
load_floor() {
  local line
  if [ -n "$OPT_MIN_TPS" ]; then MIN_TPS=$OPT_MIN_TPS; return; fi
  line=$(conf_line "$HERE/floors.conf" "$MODULE|$MODEL_NAME")
  MIN_TPS=$(cut -d'|' -f3 <<<"$line")
}

select_model() {
  load_profile
  if [ -n "$OPT_MODEL_URL" ]; then
    [ -n "$OPT_MODEL_SHA256" ] || die "--model-url needs --model-sha256 (the installer never serves an unchecked file)" 2
    [[ "$OPT_MODEL_SHA256" =~ ^[0-9a-fA-F]{64}$ ]] || die "--model-sha256 must be 64 hex digits" 2
    MODEL_NAME=custom
    MODEL_URL=$OPT_MODEL_URL
    MODEL_FILE=$(basename "${OPT_MODEL_URL%%\?*}")
    MODEL_SHA256=$(tr 'A-F' 'a-f' <<<"$OPT_MODEL_SHA256")
    MODEL_SIZE_MB=0
    MODEL_QUANT=custom
  elif [ -n "$OPT_BUNDLE" ]; then
    MODEL_NAME=bundle
    MODEL_QUANT=bundle
  else
    local line
    line=$(conf_line "$MODELS_CONF" "$MODEL_NAME")
    [ -n "$line" ] || die "unknown model '$MODEL_NAME' (see $MODELS_CONF)" 2
    IFS='|' read -r _ MODEL_FILE MODEL_URL MODEL_SHA256 MODEL_SIZE_MB MODEL_QUANT _ <<<"$line"
  fi
  if [ -n "$MODEL_FILE" ]; then MODEL_PATH="$PREFIX/models/$MODEL_FILE"; fi
  # No floor is known for a model chosen by URL or bundle unless one is given.
  case "$MODEL_NAME" in custom|bundle) MIN_TPS=${OPT_MIN_TPS:-} ;; esac
}

print_model_choice() {
  if [ "$MODEL_NAME" = bundle ]; then
    say "  model:     from the signed bundle repository $OPT_BUNDLE"
  else
    say "  model:     $MODEL_NAME ($MODEL_QUANT, ~${MODEL_SIZE_MB} MB) -> $MODEL_PATH"
  fi
  say "  context:   n_ctx=$N_CTX per slot, $PARALLEL slots, n_batch=$N_BATCH; service MemoryMax=$MEMORY_MAX"
  say "  floor:     ${MIN_TPS:-none} decode tokens/s in the health report (jetson/floors.conf, --min-tokens-per-s)"
}

check_disk() {
  local need free
  need=$(( MODEL_SIZE_MB + 4096 ))   # model + venv + the llama.cpp CUDA build tree
  if [ "$OPT_NO_SWAP" != 1 ] && ! has_disk_swap && [ ! -f "$(p /swapfile)" ]; then
    need=$(( need + $(size_to_mb "$SWAP_SIZE") ))
  fi
  free=$(free_mb "$(p "$PREFIX")") || free=0
  free=${free:-0}
  say "  disk:      ${free} MB free for $PREFIX, ~${need} MB needed"
  if [ "$free" -lt "$need" ]; then
    if [ "$FORCE" = 1 ]; then warn "only $free MB free, $need MB needed (--force)"; else
      die "only $free MB free on the disk holding $PREFIX, need ~$need MB (use --force to try anyway)" 2
    fi
  fi
}

# 8G -> 8192, 512M -> 512
size_to_mb() {
  case "$1" in
    *G) echo $(( ${1%G} * 1024 )) ;;
    *M) echo "${1%M}" ;;
    *) echo 0 ;;
  esac
}

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

ensure_model_file() {
  local dest part got
  dest=$(p "$MODEL_PATH")
  part="$dest.part"
  if [ -f "$dest" ]; then
    got=$(sha256_of "$dest")
    if [ "$got" = "$MODEL_SHA256" ]; then ok "model $dest present, sha256 verified"; return; fi
    warn "model $dest has sha256 $got, expected $MODEL_SHA256: downloading it again"
    run mv -f "$dest" "$dest.bad"
  fi
  run mkdir -p "$(dirname "$dest")"
  if [ -n "$OPT_MODEL_FILE" ]; then
    # A file brought on a drive (offline sites): checked before it is copied into place.
    say "  checking sha256 of $OPT_MODEL_FILE (expected $MODEL_SHA256)"
    got=$(sha256_of "$OPT_MODEL_FILE")
    [ "$got" = "$MODEL_SHA256" ] || die "$OPT_MODEL_FILE has sha256 $got, expected $MODEL_SHA256 for $MODEL_NAME: not installed" 2
    run install -m 0644 "$OPT_MODEL_FILE" "$part"
    run mv -f "$part" "$dest"
    SERVICE_DIRTY=1
    ok "model copied and verified: $dest"
    return
  fi
  # -C -: resume a partial download from an earlier, interrupted run.
  run curl -fL --retry 5 --retry-delay 5 -C - -o "$part" "$MODEL_URL"
  if [ "$DRY_RUN" = 1 ]; then
    say "  [dry-run] check sha256 $MODEL_SHA256, then move $part -> $dest"
    return
  fi
  got=$(sha256_of "$part")
  if [ "$got" != "$MODEL_SHA256" ]; then
    rm -f "$part"
    die "sha256 mismatch for $MODEL_URL: got $got, expected $MODEL_SHA256 (partial file removed)"
  fi
  run mv -f "$part" "$dest"
  run chmod 0644 "$dest"
  SERVICE_DIRTY=1
  ok "model downloaded and verified: $dest"
}

# --bundle DIR|URL: the signed (TUF) bundle path, through the gateway's own updater.
ensure_bundle() {
  local root=$OPT_TRUSTED_ROOT data_dir root_dest
  data_dir=$(p /var/lib/edgecloud)
  # The bundle's own root would vouch for the bundle it came with: trusting it is trust on first use,
  # which the operator must ask for by name.
  if [ -z "$root" ] && [ -d "$OPT_BUNDLE" ] && [ "$OPT_TRUST_BUNDLE_ROOT" = 1 ]; then
    root="$OPT_BUNDLE/metadata/1.root.json"
    warn "trust on first use: the bundle's own root ($root) is trusted from now on"
  fi
  if [ -z "$root" ] && [ -d "$OPT_BUNDLE" ]; then
    die "--bundle DIR needs --trusted-root ROOT_JSON (a root that came with the device), or --trust-bundle-root to trust the root inside DIR on first use" 2
  fi
  [ -n "$root" ] || die "--bundle URL needs --trusted-root ROOT_JSON (a root that came with the device, not from the network)" 2
  [ -f "$root" ] || die "trusted root $root not found" 2
  if [ "$DRY_RUN" = 0 ] && ! "$VENV/bin/edgecloud" models update --help >/dev/null 2>&1; then
    die "this edgecloud build has no 'edgecloud models update' command yet: use --model-url/--model-sha256 or the pinned default model" 2
  fi
  root_dest=$(p /etc/edgecloud/trusted-root.json)
  put_file "$root_dest" 0644 <"$root"
  run "$VENV/bin/edgecloud" models update --repository "$OPT_BUNDLE" --trusted-root "$root_dest" \
    --data-dir "$data_dir" --hardware "$FLEET_HARDWARE" --once
  # The service runs as its own user and must own its state (systemd's StateDirectory).
  if [ -z "$ROOT" ]; then run chown -R "$SERVICE_USER:$SERVICE_USER" "$data_dir"; fi
  # The store owns its layout: ask it which GGUF is current (what the gateway will serve).
  if [ "$DRY_RUN" = 0 ]; then
    local found
    found=$("$VENV/bin/python" -c 'import sys
from pathlib import Path
from models.store import ModelStore
current = ModelStore(Path(sys.argv[1])).current()
print((current.artifacts.get("gguf") if current else "") or "")' "$data_dir") || found=""
    [ -n "$found" ] || die "the signed-bundle update left no current model in $data_dir (see its output above)"
    MODEL_PATH=${found#"$ROOT"}
    ok "bundle installed: $MODEL_PATH"
    if [ "$(state_get bundle_model)" != "$MODEL_PATH" ]; then
      state_set bundle_model "$MODEL_PATH"
      SERVICE_DIRTY=1
    fi
  fi
}

ensure_model() {
  if [ "$MODEL_NAME" = bundle ]; then ensure_bundle; else ensure_model_file; fi
}
