# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# Device tuning: a swap file, zram, text mode, the power mode (verified; a reboot if it needs one),
# jetson_clocks at boot when asked for.
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

# The clocks as they were before this script changed anything (power mode included), for
# --uninstall's `jetson_clocks --restore`. Stored once, before the first change.
store_clocks() {
  local saved
  saved=$(p /var/lib/edgecloud-setup/jetson_clocks.saved)
  if [ -f "$saved" ]; then ok "original clocks already stored ($saved)"; return; fi
  run mkdir -p "$(dirname "$saved")"
  run jetson_clocks --store "$saved"
}

# Apply the power mode once and verify it with `nvpmodel -q`. A change that needs a reboot (modes
# with other CPU/GPU configurations) makes nvpmodel ask; with no answer it changes nothing. Then
# either --reboot lets it reboot (and edgecloud-setup-resume.service re-runs this script after the
# boot), or the script stops here and says exactly what to do: nothing else has been changed yet.
tune_power() {
  local current after out
  POWER_MODE_ID=$(power_mode_id_for "$OPT_POWER_MODE")
  [ -n "$POWER_MODE_ID" ] || die "power mode '$OPT_POWER_MODE' is not in $(p /etc/nvpmodel.conf)" 2
  POWER_MODE_NAME=$(power_mode_name_for "$POWER_MODE_ID")
  have nvpmodel || die "nvpmodel not found: is this JetPack's L4T userspace?"
  have jetson_clocks || die "jetson_clocks not found: is this JetPack's L4T userspace?"
  current=$(current_power_mode) || current=""
  if [ "$current" = "$POWER_MODE_ID" ] && ! mode_cores_online "$POWER_MODE_ID"; then
    state_set pending_power_mode "$POWER_MODE_ID"
    state_set pending_boot_id "$(boot_id)"
    reboot_needed "nvpmodel reports $POWER_MODE_NAME ($POWER_MODE_ID) but only $CPU_COUNT of its $(mode_cores "$POWER_MODE_ID") cores are online"
  fi
  if [ "$current" = "$POWER_MODE_ID" ]; then
    ok "power mode $POWER_MODE_NAME ($POWER_MODE_ID) active (nvpmodel -q)"
    if [ -n "$(state_get pending_power_mode)" ]; then state_set pending_power_mode ""; fi
    return
  fi
  if [ "$(state_get pending_power_mode)" = "$POWER_MODE_ID" ] && [ "$(state_get pending_boot_id)" = "$(boot_id)" ]; then
    reboot_needed "the power mode $POWER_MODE_NAME ($POWER_MODE_ID) is waiting for a reboot"
  fi
  store_clocks
  [ -n "$(state_get previous_power_mode)" ] || state_set previous_power_mode "${current:-unknown}"
  if [ "$DRY_RUN" = 1 ]; then
    run nvpmodel -m "$POWER_MODE_ID"
    say "  [dry-run] verify with nvpmodel -q; stop (or reboot with --reboot) if the change needs a reboot"
    return
  fi
  printf '  + %s\n' "nvpmodel -m $POWER_MODE_ID"
  # No input: a change that needs a reboot is not applied, and the check below says so.
  out=$(nvpmodel -m "$POWER_MODE_ID" </dev/null 2>&1) || true
  [ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/    /'
  after=$(current_power_mode) || after=""
  if [ "$after" = "$POWER_MODE_ID" ] && mode_cores_online "$POWER_MODE_ID"; then
    ok "power mode $POWER_MODE_NAME ($POWER_MODE_ID) applied and verified (nvpmodel -q)"
    TUNE_CHANGED=1
    return
  fi
  state_set pending_power_mode "$POWER_MODE_ID"
  state_set pending_boot_id "$(boot_id)"
  reboot_needed "nvpmodel did not switch to $POWER_MODE_NAME ($POWER_MODE_ID) without a reboot (still ${after:-unknown})"
}

# Cores a mode brings online: its "CPU_ONLINE CORE_n 1" lines in /etc/nvpmodel.conf (empty if unknown).
mode_cores() {
  local conf
  conf=$(p /etc/nvpmodel.conf)
  [ -r "$conf" ] || return 0
  awk -v id="$1" '
    /^<[[:space:]]*POWER_MODEL/ { inmode = ($0 ~ ("ID=" id "[[:space:]]")) }
    inmode && $1 == "CPU_ONLINE" && $3 == "1" { n++ }
    END { if (n) print n }' "$conf"
}

# The second half of "verified": nvpmodel -q can name a mode whose cores are not online yet
# (set for the next boot); the online cores must be at least those the mode lists.
mode_cores_online() {
  local want
  want=$(mode_cores "$1")
  count_cpus
  [ -z "$want" ] || [ "$CPU_COUNT" -ge "$want" ]
}

# /proc/sys/kernel/random/boot_id changes at every boot: how a re-run knows a reboot happened.
boot_id() { cat "$(p /proc/sys/kernel/random/boot_id)" 2>/dev/null || echo unknown; }

reboot_needed() {
  warn "$1"
  if [ "$OPT_REBOOT" = 1 ]; then
    install_resume_unit
    say "  rebooting to apply the power mode; edgecloud-setup-resume.service finishes the installation after the boot"
    # nvpmodel's own prompt, answered: it sets the mode for the next boot and reboots.
    printf 'YES\n' | run nvpmodel -m "$POWER_MODE_ID"
    exit "$EXIT_REBOOT"
  fi
  say ""
  say "REBOOT NEEDED: the power mode $POWER_MODE_NAME ($POWER_MODE_ID) only takes effect after a reboot."
  say "  Nothing after the tuning step has been done yet. Either:"
  say "    sudo nvpmodel -m $POWER_MODE_ID      # answer YES: the board reboots into the new mode"
  say "    then: sudo $0 ${ORIG_ARGS[*]}   # resumes: finds the mode active and carries on"
  say "  or re-run this command with --reboot to have it reboot and resume by itself."
  exit "$EXIT_REBOOT"
}

# A one-shot unit that re-runs setup.sh with the same options after the reboot --reboot asked for.
# The options are kept NUL-separated in a file (no quoting in the unit), and the resumed run
# removes the unit before anything else so that a failure cannot loop at every boot.
install_resume_unit() {
  local args_file
  args_file=$(p /var/lib/edgecloud-setup/resume-args)
  if [ "$DRY_RUN" = 0 ]; then
    mkdir -p "$(dirname "$args_file")"
    printf '%s\0' "${ORIG_ARGS[@]}" >"$args_file"
  fi
  put_file "$(p /etc/systemd/system/edgecloud-setup-resume.service)" 0644 < <(render "$HERE/systemd/edgecloud-setup-resume.service.in" \
    SETUP "$HERE/setup.sh")
  run systemctl daemon-reload
  run systemctl enable edgecloud-setup-resume.service
}

remove_resume_unit() {
  local unit
  unit=$(p /etc/systemd/system/edgecloud-setup-resume.service)
  [ -f "$unit" ] || return 0
  run systemctl disable edgecloud-setup-resume.service
  run rm -f "$unit"
  run systemctl daemon-reload
}

# jetson_clocks at boot is a choice (--jetson-clocks): it pins CPU, GPU and memory clocks at their
# maximum, which helps the first tokens of a burst but costs heat and idle power in a closed kiosk.
tune_clocks() {
  local unit tool_clocks
  unit=$(p /etc/systemd/system/edgecloud-tune.service)
  if [ "$OPT_JETSON_CLOCKS" != 1 ]; then
    if [ -f "$unit" ]; then
      # The stored clocks belong to the mode found before setup: not restored on top of this one.
      run systemctl disable edgecloud-tune.service
      run rm -f "$unit"
      UNITS_CHANGED=1
      say "  note: the clocks stay pinned until the next boot, then DVFS manages them"
    else
      ok "clocks left to DVFS (jetson_clocks at boot: only with --jetson-clocks)"
    fi
    return
  fi
  store_clocks
  tool_clocks=$(command -v jetson_clocks)
  tool_clocks=${tool_clocks#"$ROOT"}
  put_file "$unit" 0644 < <(render "$HERE/systemd/edgecloud-tune.service.in" JETSON_CLOCKS "$tool_clocks")
  if [ "$FILE_CHANGED" = 1 ]; then
    UNITS_CHANGED=1
    run jetson_clocks
  fi
  if ! systemctl is-enabled --quiet edgecloud-tune.service 2>/dev/null; then
    UNITS_TO_ENABLE+=(edgecloud-tune.service)
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

# Before anything is built: the llama.cpp CUDA build needs the swap on an 8 GB board and the full
# power mode's cores (the factory 15 W mode keeps some offline), and the cores are counted after.
tune_device() {
  tune_swap
  tune_zram
  tune_text_mode
  tune_power
  tune_clocks
}
