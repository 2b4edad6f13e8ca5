# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# Device tuning: power mode + jetson_clocks at boot, a swap file, zram, text mode.
#
# Why: an Orin NX leaves the factory in a 15 W mode (PM_CONFIG DEFAULT=2) with DVFS clocks, which
# costs a large share of decode speed without any error; with no disk swap an 8 GB board
# OOM-kills the gateway during the CUDA build or a long context; the desktop holds ~800 MB.

POWER_MODE_ID=""
POWER_MODE_NAME=""
TUNE_CHANGED=0

# nvpmodel.conf declares "< POWER_MODEL ID=0 NAME=MAXN >"; ids differ between modules and
# JetPack releases (JetPack 6.2's "super" configs add MAXN_SUPER), so the name decides.
power_mode_id_for() {
  local want=$1 conf id=""
  conf=$(p /etc/nvpmodel.conf)
  if [[ "$want" =~ ^[0-9]+$ ]]; then echo "$want"; return; fi
  if [ -r "$conf" ]; then
    if [ "$want" = MAXN ]; then
      id=$(sed -n 's/^<[[:space:]]*POWER_MODEL[[:space:]]*ID=\([0-9]*\)[[:space:]]*NAME=MAXN_SUPER[[:space:]]*>.*/\1/p' "$conf" | head -n 1)
    fi
    if [ -z "$id" ]; then
      id=$(sed -n "s/^<[[:space:]]*POWER_MODEL[[:space:]]*ID=\([0-9]*\)[[:space:]]*NAME=${want}[[:space:]]*>.*/\1/p" "$conf" | head -n 1)
    fi
  fi
  if [ -z "$id" ] && [ "$want" = MAXN ]; then id=0; fi   # MAXN is mode 0 on both Orin NX modules
  echo "$id"
}

power_mode_name_for() {
  local conf name=""
  conf=$(p /etc/nvpmodel.conf)
  if [ -r "$conf" ]; then
    name=$(sed -n "s/^<[[:space:]]*POWER_MODEL[[:space:]]*ID=$1[[:space:]]*NAME=\([A-Za-z0-9_]*\)[[:space:]]*>.*/\1/p" "$conf" | head -n 1)
  fi
  echo "${name:-mode $1}"
}

# `nvpmodel -q` prints "NV Power Mode: MAXN" then the mode id on its own line.
current_power_mode() { nvpmodel -q 2>/dev/null | sed -n 's/^[[:space:]]*\([0-9][0-9]*\)[[:space:]]*$/\1/p' | tail -n 1; }

tune_power() {
  local current tool_nvp tool_clocks
  POWER_MODE_ID=$(power_mode_id_for "$OPT_POWER_MODE")
  [ -n "$POWER_MODE_ID" ] || die "power mode '$OPT_POWER_MODE' is not in $(p /etc/nvpmodel.conf)" 2
  POWER_MODE_NAME=$(power_mode_name_for "$POWER_MODE_ID")
  have nvpmodel || die "nvpmodel not found: is this JetPack's L4T userspace?"
  have jetson_clocks || die "jetson_clocks not found: is this JetPack's L4T userspace?"
  tool_nvp=$(command -v nvpmodel)
  tool_clocks=$(command -v jetson_clocks)
  tool_nvp=${tool_nvp#"$ROOT"}
  tool_clocks=${tool_clocks#"$ROOT"}
  current=$(current_power_mode) || current=""
  if [ "$current" = "$POWER_MODE_ID" ]; then
    ok "power mode $POWER_MODE_NAME ($POWER_MODE_ID) already active"
  else
    [ -n "$(state_get previous_power_mode)" ] || state_set previous_power_mode "${current:-unknown}"
    # A mode change that needs a reboot makes nvpmodel ask; stdin is closed so it does not block.
    run nvpmodel -m "$POWER_MODE_ID" </dev/null
    TUNE_CHANGED=1
    say "  note: some mode changes only take full effect after a reboot"
  fi
  put_file "$(p /etc/systemd/system/edgecloud-tune.service)" 0644 < <(render "$HERE/systemd/edgecloud-tune.service.in" \
    POWER_MODE_ID "$POWER_MODE_ID" POWER_MODE_NAME "$POWER_MODE_NAME" \
    NVPMODEL "$tool_nvp" JETSON_CLOCKS "$tool_clocks")
  if [ "$FILE_CHANGED" = 1 ]; then
    UNITS_CHANGED=1
    TUNE_CHANGED=1
  fi
  if ! systemctl is-enabled --quiet edgecloud-tune.service 2>/dev/null; then
    UNITS_TO_ENABLE+=(edgecloud-tune.service)
  fi
  if [ "$TUNE_CHANGED" = 1 ]; then
    local saved
    saved=$(p /var/lib/edgecloud-setup/jetson_clocks.saved)
    # Keep the clocks as they were before us, for --uninstall (jetson_clocks --restore).
    if [ ! -f "$saved" ]; then
      run mkdir -p "$(dirname "$saved")"
      run jetson_clocks --store "$saved"
    fi
    run jetson_clocks
  fi
}

has_disk_swap() {
  local swaps
  swaps=$(p /proc/swaps)
  [ -r "$swaps" ] && awk 'NR > 1 && $1 !~ /zram/ {found=1} END {exit !found}' "$swaps"
}

tune_swap() {
  local file fstab line
  file=$(p /swapfile)
  fstab=$(p /etc/fstab)
  line="/swapfile none swap sw 0 0"
  if [ "$OPT_NO_SWAP" = 1 ]; then ok "swap left alone (--no-swap)"; return; fi
  if [ -f "$file" ] && grep -qxF "$line" "$fstab" 2>/dev/null; then
    ok "swap file /swapfile present and in /etc/fstab"
  elif has_disk_swap; then
    ok "a disk swap is already active"
  else
    run fallocate -l "$SWAP_SIZE" "$file"
    run chmod 600 "$file"
    run mkswap "$file"
    run swapon "$file"
    put_file "$fstab" 0644 < <(cat "$fstab" 2>/dev/null || true; printf '%s\n' "$line")
    state_set swapfile_created 1
  fi
}

tune_zram() {
  if [ "$OPT_NO_ZRAM" != 1 ]; then return; fi
  if systemctl is-enabled --quiet nvzramconfig.service 2>/dev/null; then
    run systemctl disable --now nvzramconfig.service
    state_set zram_disabled 1
  else
    ok "zram (nvzramconfig.service) already disabled"
  fi
}

tune_text_mode() {
  if [ "$OPT_TEXT_MODE" != 1 ]; then return; fi
  local current
  current=$(systemctl get-default 2>/dev/null) || current=""
  if [ "$current" = multi-user.target ]; then ok "boots to text mode already"; return; fi
  [ -n "$(state_get previous_default_target)" ] || state_set previous_default_target "${current:-graphical.target}"
  run systemctl set-default multi-user.target
  say "  note: the desktop stops at the next reboot (frees ~800 MB)"
}

tune_device() {
  tune_power
  tune_swap
  tune_zram
  tune_text_mode
}
