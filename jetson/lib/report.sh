# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# The closing health report: versions, GPU use, power mode, model, one timed request.
#
# Why tegrastats runs during the request: "GPU offload supported" is a build fact and
# "N/N layers offloaded" a load fact; GR3D_FREQ above 0 % while tokens stream is the live one.

venv_py() { "$VENV/bin/python" "$@" 2>/dev/null; }

report_line() { printf '  %-22s %s\n' "$1" "$2"; }

health_report() {
  step "Health report"
  if [ "$DRY_RUN" = 1 ]; then
    say "  [dry-run] versions, nvpmodel -q, a timed request to http://127.0.0.1:$PORT/v1/chat/completions with tegrastats"
    return
  fi
  local llama ort edgecloud_v mode tegra_log tegra_pid="" probe gr3d ram ttft tps tokens perr
  local versions
  versions=$(venv_py -c 'import importlib.metadata as m, llama_cpp, onnxruntime as o
print(llama_cpp.__version__)
print(o.__version__, ",".join(o.get_available_providers()))
print(m.version("edgecloud"))') || versions=""
  llama=$(sed -n 1p <<<"$versions"); ort=$(sed -n 2p <<<"$versions"); edgecloud_v=$(sed -n 3p <<<"$versions")
  mode=$(nvpmodel -q 2>/dev/null | sed -n 's/^NV Power Mode:[[:space:]]*//p' | head -n 1) || mode="?"

  tegra_log=$(mktemp)
  if have tegrastats; then
    tegrastats --interval 500 >"$tegra_log" 2>/dev/null &
    tegra_pid=$!
  fi
  probe=$("$VENV/bin/python" "$HERE/health_probe.py" probe --url "http://127.0.0.1:$PORT" --max-tokens 64) || true
  if [ -n "$tegra_pid" ]; then
    kill "$tegra_pid" 2>/dev/null || true
    wait "$tegra_pid" 2>/dev/null || true
  fi
  # "GR3D_FREQ 61%@[1020]" (JetPack 6) or "GR3D_FREQ 61%@1020" (JetPack 5)
  gr3d=$(sed -n 's/.*GR3D_FREQ \([0-9][0-9]*\)%.*/\1/p' "$tegra_log" | sort -n | tail -n 1)
  ram=$(sed -n 's/.*RAM \([0-9]*\/[0-9]*MB\).*/\1/p' "$tegra_log" | tail -n 1)
  rm -f "$tegra_log"
  ttft=$(sed -n 's/^ttft_s=//p' <<<"$probe")
  tps=$(sed -n 's/^tokens_per_s=//p' <<<"$probe")
  tokens=$(sed -n 's/^completion_tokens=//p' <<<"$probe")
  perr=$(sed -n 's/^probe_error=//p' <<<"$probe")

  report_line "board" "$MODULE_NAME ($MODULE), $((MEM_KB / 1024)) MB"
  report_line "L4T / JetPack" "$L4T_VERSION / $JETPACK_VERSION"
  report_line "CUDA" "${CUDA_VERSION:-?}"
  report_line "edgecloud" "$edgecloud_v ($PREFIX/venv)"
  report_line "llama-cpp-python" "$llama (CUDA build, sm_87)"
  report_line "onnxruntime" "$ort${ORT_NOTE:+ ($ORT_NOTE)}"
  report_line "power mode" "${mode:-?} (wanted $POWER_MODE_NAME), jetson_clocks at boot: edgecloud-tune.service"
  report_line "model" "$MODEL_PATH (n_ctx $N_CTX)"
  if [ "$GPU_VERDICT" = gpu ]; then
    report_line "GPU" "in use: $GPU_OFFLOADED/$GPU_LAYERS layers offloaded; GR3D peak ${gr3d:-?}% during the request"
  else
    report_line "GPU" "NOT in use (${GPU_VERDICT:-unknown})"
  fi
  report_line "memory (tegrastats)" "${ram:-?}"
  report_line "gateway" "ready on 127.0.0.1:$PORT (model loaded)"
  if [ -n "$ttft" ]; then
    report_line "test request" "time to first token ${ttft} s, ${tps} tokens/s decode ($tokens tokens)"
  else
    report_line "test request" "FAILED: ${perr:-no answer}"
    return 1
  fi
}
