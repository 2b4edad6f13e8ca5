# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# --uninstall: undo what setup.sh did, using the state it recorded, and nothing else.
#
# Why state-driven: a swap file, zram or the desktop may have been set up by the operator
# before us; only the changes this script recorded as its own are reverted. The config and
# the data directory stay unless --purge (they hold the admin token and cached answers).

# Files the service user still owns outside the removed folders (e.g. a copy an operator made
# with sudo -u): listed, and removed with --purge, before the user goes and they turn into
# orphaned numeric ids that a later user with the same id would inherit.
remove_user_files() {
  local entry uid gid files=()
  entry=$(getent passwd "$SERVICE_USER") || return 0
  uid=$(cut -d: -f3 <<<"$entry"); gid=$(cut -d: -f4 <<<"$entry")
  [[ "$uid" =~ ^[0-9]+$ ]] && [[ "$gid" =~ ^[0-9]+$ ]] || return 0
  while IFS= read -r -d '' f; do files+=("$f"); done < <(
    find "$(p /)" -xdev \( -uid "$uid" -o -gid "$gid" \) -print0 2>/dev/null || true)
  [ "${#files[@]}" -gt 0 ] || { ok "no other files belong to $SERVICE_USER"; return 0; }
  if [ "$OPT_PURGE" = 1 ]; then
    run rm -rf "${files[@]}"
  else
    warn "files still owned by $SERVICE_USER (uid $uid), kept (use --purge to remove them):"
    printf '    %s\n' "${files[@]}" >&2
  fi
}

uninstall() {
  local unit f previous
  step "Stopping and removing the edgecloud services"
  for unit in edgecloud.service edgecloud-tune.service edgecloud-setup-resume.service; do
    f=$(p "/etc/systemd/system/$unit")
    if [ -f "$f" ]; then
      run systemctl disable --now "$unit"
      run rm -f "$f"
    else
      ok "$unit not installed"
    fi
  done
  run systemctl daemon-reload

  step "Reverting device tuning done by setup.sh"
  # The mode first, then the clocks stored before setup changed anything (a mode change resets them).
  previous=$(state_get previous_power_mode)
  if [[ "$previous" =~ ^[0-9]+$ ]]; then
    run nvpmodel -m "$previous" </dev/null
    if [ "$DRY_RUN" = 0 ] && [ "$(current_power_mode)" != "$previous" ]; then
      warn "the previous power mode $previous needs a reboot: run 'sudo nvpmodel -m $previous' and answer YES"
    fi
  fi
  f=$(p /var/lib/edgecloud-setup/jetson_clocks.saved)
  if [ -f "$f" ]; then run jetson_clocks --restore "$f"; fi
  if [ "$(state_get swapfile_created)" = 1 ]; then
    run swapoff "$(p /swapfile)" || true
    run rm -f "$(p /swapfile)"
    put_file "$(p /etc/fstab)" 0644 < <(grep -vxF "/swapfile none swap sw 0 0" "$(p /etc/fstab)" || true)
  fi
  if [ "$(state_get zram_disabled)" = 1 ]; then run systemctl enable --now nvzramconfig.service; fi
  previous=$(state_get previous_default_target)
  if [ -n "$previous" ]; then run systemctl set-default "$previous"; fi

  step "Removing $PREFIX"
  if [ -d "$(p "$PREFIX")" ]; then run rm -rf "$(p "$PREFIX")"; else ok "$PREFIX already gone"; fi
  if [ "$(state_get ppa_added)" = deadsnakes ]; then
    # Python 3.10 itself stays (other software may use it); the source it came from goes.
    run add-apt-repository --remove -y ppa:deadsnakes/ppa
  fi
  if [ "$OPT_PURGE" = 1 ]; then
    run rm -rf "$(p /etc/edgecloud)" "$(p /var/lib/edgecloud)"
  else
    say "  kept $(p /etc/edgecloud) and $(p /var/lib/edgecloud) (use --purge to remove them)"
  fi
  if [ "$(state_get user_created)" = 1 ]; then
    remove_user_files
    run userdel "$SERVICE_USER"
  fi
  run rm -rf "$(p /var/lib/edgecloud-setup)"
  say ""
  say "edgecloud removed."
}
