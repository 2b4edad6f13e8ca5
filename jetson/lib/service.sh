# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# /etc/edgecloud/config.toml (kept if present), the hardened systemd units, start, /readyz.
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

write_service_unit() {
  # Process substitution, not a pipe: put_file must run in this shell to report FILE_CHANGED.
  put_file "$(p /etc/systemd/system/edgecloud.service)" 0644 < <(render "$HERE/systemd/edgecloud.service.in" \
    PREFIX "$PREFIX" USER "$SERVICE_USER" CUDA_HOME "${CUDA_HOME#"$ROOT"}" \
    MEMORY_MAX "$MEMORY_MAX" MEMORY_HIGH "$MEMORY_HIGH")
  if [ "$FILE_CHANGED" = 1 ]; then UNITS_CHANGED=1; fi
  if ! systemctl is-enabled --quiet edgecloud.service 2>/dev/null; then
    UNITS_TO_ENABLE+=(edgecloud.service)
  fi
}

# Prove the GPU is used: the build supports offload and the chosen model loads with every
# layer on the GPU. Done before the service starts, while the memory is still free.
gpu_proof() {
  local out key rc=0 cached
  key="$(basename "$MODEL_PATH")|$LLAMA_VERSION|$N_CTX"
  cached=$(state_get gpu_check)
  if [ "$DRY_RUN" = 1 ]; then
    run "$VENV/bin/python" "$HERE/gpu_check.py" --model "$(p "$MODEL_PATH")" --n-ctx "$N_CTX"
    return
  fi
  if [ "$cached" = "$key|gpu" ] && [ "$SERVICE_DIRTY" = 0 ]; then
    GPU_VERDICT=gpu
    GPU_OFFLOADED=$(state_get gpu_offloaded); GPU_LAYERS=$(state_get gpu_layers)
    ok "GPU offload proven on an earlier run: $GPU_OFFLOADED/$GPU_LAYERS layers ($MODEL_PATH)"
    return
  fi
  if systemctl is-active --quiet edgecloud.service 2>/dev/null; then run systemctl stop edgecloud.service; fi
  say "  loading $MODEL_PATH with n_gpu_layers=-1 to check where its layers go"
  out=$("$VENV/bin/python" "$HERE/gpu_check.py" --model "$(p "$MODEL_PATH")" --n-ctx "$N_CTX") || rc=$?
  printf '%s\n' "$out" | sed 's/^/    /'
  GPU_VERDICT=$(sed -n 's/^verdict=//p' <<<"$out")
  GPU_OFFLOADED=$(sed -n 's/^offloaded=//p' <<<"$out")
  GPU_LAYERS=$(sed -n 's/^layers=//p' <<<"$out")
  if [ "$rc" != 0 ] || [ "$GPU_VERDICT" != gpu ]; then
    die "the model is NOT on the GPU (verdict: ${GPU_VERDICT:-none}): see 'How to tell a CPU-only build' in jetson/README.md"
  fi
  ok "GPU in use: $GPU_OFFLOADED/$GPU_LAYERS layers offloaded"
  state_set gpu_check "$key|gpu"
  state_set gpu_offloaded "$GPU_OFFLOADED"
  state_set gpu_layers "$GPU_LAYERS"
}

start_service() {
  if [ "$UNITS_CHANGED" = 1 ]; then run systemctl daemon-reload; fi
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

install_service() {
  write_config
  write_service_unit
  start_service
  wait_ready
}
