# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# /etc/edgecloud/config.toml (kept if present), the hardened unit, the GPU proof as the service
# runs, start, /readyz.
#
# Why restart only on change: a second run must change nothing, and a kiosk in use must not
# lose its loaded model because an installer was re-run to check the board.

SERVICE_DIRTY=0      # set by steps whose result the running service would not see
UNITS_CHANGED=0
UNITS_TO_ENABLE=()
PORT=8080
GPU_VERDICT=""
GPU_OFFLOADED=""
GPU_LAYERS=""

# render TEMPLATE KEY VALUE ... -> stdout, every @KEY@ replaced by VALUE (values may hold / & |).
render() {
  local template=$1 text key value
  shift
  text=$(cat "$template")
  while [ "$#" -ge 2 ]; do
    key=$1 value=$2
    shift 2
    text=${text//@"$key"@/"$value"}
  done
  printf '%s\n' "$text"
}

random_token() { od -An -N24 -tx1 /dev/urandom | tr -d ' \n'; }

config_port() {
  local conf
  conf=$(p /etc/edgecloud/config.toml)
  [ -r "$conf" ] || { echo "${OPT_PORT:-8080}"; return; }
  awk '/^\[/{section=$0} section=="[server]" && $1=="port" {gsub(/[^0-9]/,"",$3); print $3; exit}' "$conf"
}

write_config() {
  local conf model_line fleet_lines
  conf=$(p /etc/edgecloud/config.toml)
  if [ -f "$conf" ]; then
    ok "$conf exists: kept as is"
    if [ -n "$MODEL_PATH" ] && [ "$MODEL_NAME" != bundle ] && ! grep -qF "\"$MODEL_PATH\"" "$conf"; then
      warn "$conf does not point at $MODEL_PATH: edit [edge] model_path if that model should be served"
    fi
    return
  fi
  if [ "$MODEL_NAME" = bundle ]; then
    model_line="# model_path: none; the signed-bundle store under data_dir provides the model"
    # The gateway's own update agent keeps checking this repository after installation.
    fleet_lines=$(printf 'enabled = true\nrepository_url = "%s"\ntrusted_root = "/etc/edgecloud/trusted-root.json"' "$OPT_BUNDLE")
  else
    model_line="model_path = \"$MODEL_PATH\""
    fleet_lines="enabled = false"
  fi
  put_file "$conf" 0640 "root:$SERVICE_USER" < <(render "$HERE/config.toml.in" \
    MODULE "$MODULE" JETPACK "$JETPACK_VERSION" PORT "${OPT_PORT:-8080}" \
    ADMIN_TOKEN "$(random_token)" MODEL_PATH_LINE "$model_line" N_CTX "$N_CTX" N_BATCH "$N_BATCH" PARALLEL "$PARALLEL" \
    N_THREADS "$CPU_COUNT" FLEET_LINES "$fleet_lines" FLEET_HARDWARE "$FLEET_HARDWARE")
  SERVICE_DIRTY=1
}

render_service_unit() {
  render "$HERE/systemd/edgecloud.service.in" \
    PREFIX "$PREFIX" USER "$SERVICE_USER" CUDA_HOME "${CUDA_HOME#"$ROOT"}" \
    MEMORY_MAX "$MEMORY_MAX" MEMORY_HIGH "$MEMORY_HIGH"
}

write_service_unit() {
  # Process substitution, not a pipe: put_file must run in this shell to report FILE_CHANGED.
  put_file "$(p /etc/systemd/system/edgecloud.service)" 0644 < <(render_service_unit)
  if [ "$FILE_CHANGED" = 1 ]; then UNITS_CHANGED=1; fi
  if ! systemctl is-enabled --quiet edgecloud.service 2>/dev/null; then
    UNITS_TO_ENABLE+=(edgecloud.service)
  fi
  # The GPU proof runs under the unit's sandbox, which hides /home (ProtectHome): it needs its
  # own copy of the check, next to the venv it runs in.
  put_file "$(p "$PREFIX")/bin/gpu_check.py" 0755 <"$HERE/gpu_check.py"
  if [ "$UNITS_CHANGED" = 1 ]; then run systemctl daemon-reload; fi
}

# The unit's [Service] lines that shape the process (user, groups, sandbox, environment, memory
# limits) as systemd-run properties, so the GPU proof runs exactly as the gateway will.
SERVICE_PROPS=()
service_run_properties() {
  local line key
  SERVICE_PROPS=()
  while IFS= read -r line; do
    case "$line" in ''|'#'*|'['*) continue ;; esac
    key=${line%%=*}
    case "$key" in
      Type|NotifyAccess|ExecStart|ExecStartPre|ExecStartPost|ExecStop|ExecReload|Restart|RestartSec) continue ;;
      TimeoutStartSec|TimeoutStopSec|WatchdogSec) continue ;;
    esac
    SERVICE_PROPS+=("--property=$line")
  done < <(render_service_unit | sed -n '/^\[Service\]/,/^\[/p')
}

parse_gpu_check() {
  GPU_VERDICT=$(sed -n 's/^verdict=//p' <<<"$1")
  GPU_OFFLOADED=$(sed -n 's/^offloaded=//p' <<<"$1")
  GPU_LAYERS=$(sed -n 's/^layers=//p' <<<"$1")
}

# Prove the GPU is used the way the service will use it: the check loads the model with
# n_gpu_layers=-1 through systemd-run with the unit's own user, groups, sandbox and environment.
# A check as root can pass while the service user, lacking a device group or seeing another
# environment, silently falls back to the CPU. Done with the service stopped (memory is shared).
gpu_proof() {
  local out key rc=0 cached check model root_out
  key="$(basename "$MODEL_PATH")|$LLAMA_VERSION|$N_CTX"
  cached=$(state_get gpu_check)
  check="$(p "$PREFIX")/bin/gpu_check.py"
  model=$(p "$MODEL_PATH")
  service_run_properties
  if [ "$DRY_RUN" = 1 ]; then
    run systemd-run --wait --pipe --collect --quiet --service-type=exec "${SERVICE_PROPS[@]}" -- \
      "$VENV/bin/python" "$check" --model "$model" --n-ctx "$N_CTX"
    return
  fi
  if [ "$cached" = "$key|gpu" ] && [ "$SERVICE_DIRTY" = 0 ] && [ "$UNITS_CHANGED" = 0 ]; then
    GPU_VERDICT=gpu
    GPU_OFFLOADED=$(state_get gpu_offloaded); GPU_LAYERS=$(state_get gpu_layers)
    ok "GPU offload proven on an earlier run as $SERVICE_USER: $GPU_OFFLOADED/$GPU_LAYERS layers ($MODEL_PATH)"
    return
  fi
  have systemd-run || die "systemd-run not found: the GPU proof runs the way the service runs"
  if systemctl is-active --quiet edgecloud.service 2>/dev/null; then run systemctl stop edgecloud.service; fi
  say "  loading $MODEL_PATH with n_gpu_layers=-1 as $SERVICE_USER, in the service's sandbox"
  out=$(run systemd-run --wait --pipe --collect --quiet --service-type=exec "${SERVICE_PROPS[@]}" -- \
    "$VENV/bin/python" "$check" --model "$model" --n-ctx "$N_CTX") || rc=$?
  printf '%s\n' "$out" | grep -v '^  + ' | sed 's/^/    /'
  parse_gpu_check "$out"
  if [ "$rc" != 0 ] || [ "$GPU_VERDICT" != gpu ]; then
    # Tell a sandbox or permission problem from a build or memory one: the same check as root.
    root_out=$("$VENV/bin/python" "$check" --model "$model" --n-ctx "$N_CTX" 2>/dev/null) || true
    if grep -qx 'verdict=gpu' <<<"$root_out"; then
      warn "as root the model loads on the GPU; as $SERVICE_USER under the unit's sandbox it does not: check the user's groups (video, render), the unit's Environment= and DevicePolicy"
    fi
    die "the model is NOT on the GPU when run as the service runs (verdict: ${GPU_VERDICT:-none}, ${GPU_OFFLOADED:-0}/${GPU_LAYERS:-?} layers): see 'How to tell a CPU-only build' in jetson/README.md"
  fi
  ok "GPU in use as $SERVICE_USER: $GPU_OFFLOADED/$GPU_LAYERS layers offloaded"
  state_set gpu_check "$key|gpu"
  state_set gpu_offloaded "$GPU_OFFLOADED"
  state_set gpu_layers "$GPU_LAYERS"
}

# Type=notify: `systemctl start` returns when the gateway said READY=1 (its model is loaded) or
# when TimeoutStartSec ran out.
start_service() {
  if [ "${#UNITS_TO_ENABLE[@]}" -gt 0 ]; then run systemctl enable "${UNITS_TO_ENABLE[@]}"; fi
  if [ "$DRY_RUN" = 0 ] && systemctl is-active --quiet edgecloud.service 2>/dev/null; then
    if [ "$SERVICE_DIRTY" = 1 ] || [ "$UNITS_CHANGED" = 1 ]; then
      run systemctl restart edgecloud.service
    else
      ok "edgecloud.service running, nothing changed"
    fi
  else
    run systemctl start edgecloud.service
  fi
}

wait_ready() {
  PORT=$(config_port)
  PORT=${PORT:-8080}
  if [ "$DRY_RUN" = 1 ]; then
    say "  [dry-run] wait for http://127.0.0.1:$PORT/readyz (up to ${READY_TIMEOUT}s)"
    return
  fi
  say "  waiting for http://127.0.0.1:$PORT/readyz (model load, up to ${READY_TIMEOUT}s)"
  if ! "$VENV/bin/python" "$HERE/health_probe.py" wait --url "http://127.0.0.1:$PORT" --timeout "$READY_TIMEOUT" >/dev/null; then
    journalctl -u edgecloud.service -n 30 --no-pager 2>/dev/null || true
    die "the gateway did not become ready: journalctl -u edgecloud.service -e"
  fi
  ok "gateway ready on 127.0.0.1:$PORT"
}
