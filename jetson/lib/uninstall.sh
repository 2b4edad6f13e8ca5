# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# --uninstall: undo what setup.sh did, using the state it recorded, and nothing else.
#
# Why state-driven: a swap file, zram or the desktop may have been set up by the operator
# before us; only the changes this script recorded as its own are reverted. The config and
# the data directory stay unless --purge (they hold the admin token and cached answers).

uninstall() {
  local unit f previous
  step "Stopping and removing the edgecloud services"
  for unit in edgecloud.service edgecloud-tune.service; do
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
  previous=$(state_get previous_power_mode)
  if [[ "$previous" =~ ^[0-9]+$ ]]; then run nvpmodel -m "$previous" </dev/null; fi
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
  if [ "$(state_get user_created)" = 1 ]; then run userdel "$SERVICE_USER"; fi
  if [ "$OPT_PURGE" = 1 ]; then
    run rm -rf "$(p /etc/edgecloud)" "$(p /var/lib/edgecloud)"
  else
    say "  kept $(p /etc/edgecloud) and $(p /var/lib/edgecloud) (use --purge to remove them)"
  fi
  run rm -rf "$(p /var/lib/edgecloud-setup)"
  say ""
  say "edgecloud removed."
}
