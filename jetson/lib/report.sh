# shellcheck shell=bash disable=SC2034  # lib files share globals with setup.sh and each other
# The closing health report: versions, GPU use, power mode, model, one timed request.
#
# Why tegrastats runs during the request: "GPU offload supported" is a build fact and
# "N/N layers offloaded" a load fact; GR3D_FREQ above 0 % while tokens stream is the live one.

venv_py() { "$VENV/bin/python" "$@" 2>/dev/null; }

report_line() { printf '  %-22s %s\n' "$1" "$2"; }

# Throttling the hardware recorded: over-current events (the module cut its clocks to stay in its
# power budget), summed over the INA3221 monitor's counters. Empty when the board has none.
oc_events() {
  local f total=0 found=0 n
  for f in "$(p /sys/class/hwmon)"/hwmon*/oc*_event_cnt; do
    [ -r "$f" ] || continue
    n=$(cat "$f" 2>/dev/null) || continue
    [[ "$n" =~ ^[0-9]+$ ]] || continue
    total=$((total + n)); found=1
  done
  [ "$found" = 1 ] && echo "$total"
  return 0
}

# Lowest passive (software throttling) trip point of the junction sensor, in °C; empty if unknown.
tj_throttle_c() {
  local zone type trip t lowest=""
  for zone in "$(p /sys/class/thermal)"/thermal_zone*; do
    type=$(cat "$zone/type" 2>/dev/null) || continue
    case "$type" in tj-thermal|TJ-therm|tj*) ;; *) continue ;; esac
    for trip in "$zone"/trip_point_*_type; do
      [ "$(cat "$trip" 2>/dev/null)" = passive ] || continue
      t=$(cat "${trip%_type}_temp" 2>/dev/null) || continue
      [[ "$t" =~ ^[0-9]+$ ]] || continue
      if [ -z "$lowest" ] || [ "$t" -lt "$lowest" ]; then lowest=$t; fi
    done
  done
  [ -n "$lowest" ] && echo $((lowest / 1000))
  return 0
}

# awk over the tegrastats lines seen during the request: GPU load peak, junction temperature peak,
# mean module input power (VDD_IN on Orin NX; the sum of the rails where it is absent).
tegra_summary() {
  awk '
    { if (match($0, /GR3D_FREQ [0-9]+%/)) { v = substr($0, RSTART + 10, RLENGTH - 11) + 0; if (!seen || v > gr3d) gr3d = v; seen = 1 } }
    { if (match($0, /tj@-?[0-9.]+C/)) { v = substr($0, RSTART + 3, RLENGTH - 4) + 0; if (v > -200 && (!tjs || v > tj)) { tj = v; tjs = 1 } } }
    { if (match($0, /VDD_IN [0-9]+mW/)) { v = substr($0, RSTART + 7, RLENGTH - 9) + 0; pw += v; pn++ } }
    { if (match($0, /RAM [0-9]+\/[0-9]+MB/)) ram = substr($0, RSTART + 4, RLENGTH - 4) }
    END {
      printf "gr3d=%s\n", seen ? gr3d : ""
      printf "tj=%s\n", tj
      printf "power_w=%s\n", pn ? sprintf("%.1f", pw / pn / 1000) : ""
      printf "ram=%s\n", ram
    }' "$1"
}

health_report() {
  step "Health report"
  if [ "$DRY_RUN" = 1 ]; then
    say "  [dry-run] versions, nvpmodel -q, a timed request to http://127.0.0.1:$PORT/v1/chat/completions with tegrastats"
    say "  [dry-run] fail if the GPU load stays at 0 % or decode is under ${MIN_TPS:-no} tokens/s"
    return
  fi
  local llama ort edgecloud_v mode tegra_log tegra_pid="" probe gr3d ram ttft tps tokens perr versions
  local tj power oc_before oc_after tj_trip throttle="none seen" failed=0 summary
  versions=$(venv_py -c 'import importlib.metadata as m, llama_cpp, onnxruntime as o
print(llama_cpp.__version__)
print(o.__version__, ",".join(o.get_available_providers()))
print(m.version("edgecloud"))') || versions=""
  llama=$(sed -n 1p <<<"$versions"); ort=$(sed -n 2p <<<"$versions"); edgecloud_v=$(sed -n 3p <<<"$versions")
  mode=$(nvpmodel -q 2>/dev/null | sed -n 's/^NV Power Mode:[[:space:]]*//p' | head -n 1) || mode="?"

  tegra_log=$(mktemp)
  oc_before=$(oc_events)
  if have tegrastats; then
    tegrastats --interval 500 >"$tegra_log" 2>/dev/null &
    tegra_pid=$!
  fi
  probe=$("$VENV/bin/python" "$HERE/health_probe.py" probe --url "http://127.0.0.1:$PORT" --max-tokens 64) || true
  if [ -n "$tegra_pid" ]; then
    kill "$tegra_pid" 2>/dev/null || true
    wait "$tegra_pid" 2>/dev/null || true
  fi
  oc_after=$(oc_events)
  summary=$(tegra_summary "$tegra_log")
  rm -f "$tegra_log"
  gr3d=$(sed -n 's/^gr3d=//p' <<<"$summary"); tj=$(sed -n 's/^tj=//p' <<<"$summary")
  power=$(sed -n 's/^power_w=//p' <<<"$summary"); ram=$(sed -n 's/^ram=//p' <<<"$summary")
  tj_trip=$(tj_throttle_c)
  if [ -n "$oc_before" ] && [ -n "$oc_after" ] && [ "$oc_after" -gt "$oc_before" ]; then
    throttle="OVER-CURRENT: $((oc_after - oc_before)) event(s) during the request (the module cut its clocks)"
  fi
  if [ -n "$tj" ] && [ -n "$tj_trip" ] && awk -v t="$tj" -v l="$tj_trip" 'BEGIN { exit !(t >= l) }'; then
    throttle="THERMAL: junction ${tj} °C at or above the ${tj_trip} °C throttling point"
  fi
  ttft=$(sed -n 's/^ttft_s=//p' <<<"$probe")
  tps=$(sed -n 's/^tokens_per_s=//p' <<<"$probe")
  tokens=$(sed -n 's/^completion_tokens=//p' <<<"$probe")
  perr=$(sed -n 's/^probe_error=//p' <<<"$probe")

  report_line "board" "$MODULE_NAME ($MODULE), $((MEM_KB / 1024)) MB, $CPU_COUNT cores online"
  report_line "L4T / JetPack" "$L4T_VERSION / $JETPACK_VERSION"
  report_line "CUDA" "${CUDA_VERSION:-?}"
  report_line "edgecloud" "$edgecloud_v ($PREFIX/venv)"
  report_line "llama-cpp-python" "$llama (CUDA build, sm_87)"
  report_line "onnxruntime" "$ort${ORT_NOTE:+ ($ORT_NOTE)}"
  report_line "power mode" "${mode:-?} (wanted $POWER_MODE_NAME); jetson_clocks at boot: $([ "$OPT_JETSON_CLOCKS" = 1 ] && echo yes || echo "no (DVFS)")"
  report_line "model" "$MODEL_PATH (n_ctx $N_CTX)"
  report_line "GPU offload" "$GPU_OFFLOADED/$GPU_LAYERS layers, proven as $SERVICE_USER under the unit's sandbox"
  report_line "memory (tegrastats)" "${ram:-?}"
  report_line "junction temperature" "${tj:-?}${tj:+ °C peak}${tj_trip:+ (throttling from $tj_trip °C)}"
  report_line "power draw" "${power:-?}${power:+ W mean module input (VDD_IN)}"
  report_line "throttling" "$throttle"
  report_line "gateway" "ready on 127.0.0.1:$PORT (model loaded)"
  if [ -z "$ttft" ]; then
    report_line "test request" "FAILED: ${perr:-no answer}"
    return 1
  fi
  report_line "test request" "time to first token ${ttft} s, ${tps} tokens/s decode ($tokens tokens)"
  if [ -n "$power" ] && [ -n "$tps" ] && awk -v p="$power" 'BEGIN { exit !(p > 0) }'; then
    report_line "efficiency" "$(awk -v t="$tps" -v p="$power" 'BEGIN { printf "%.2f tokens per joule (decode tokens/s / W)", t / p }')"
  fi
  # The checks: each is a way the kiosk still answers while something is badly wrong.
  if have tegrastats; then
    if [ -z "$gr3d" ] || [ "$gr3d" = 0 ]; then
      warn "the GPU load (GR3D_FREQ) stayed at ${gr3d:-no reading}% during generation: the model runs on the CPU"
      failed=1
    else
      report_line "GPU load" "GR3D peak ${gr3d}% during the request"
    fi
  else
    warn "tegrastats not found: the GPU load during generation was not checked"
  fi
  if [ -n "$MIN_TPS" ] && awk -v m="$MIN_TPS" 'BEGIN { exit !(m > 0) }'; then
    if awk -v t="${tps:-0}" -v m="$MIN_TPS" 'BEGIN { exit !(t < m) }'; then
      warn "decode ran at ${tps:-0} tokens/s, under the floor of $MIN_TPS for $MODEL_NAME on $MODULE (jetson/floors.conf): check the power mode, throttling above, and the GPU offload"
      failed=1
    else
      report_line "speed check" "${tps} tokens/s >= floor ${MIN_TPS} (jetson/floors.conf)"
    fi
  fi
  if [ "$failed" = 1 ]; then
    say "  HEALTH CHECK FAILED (see the warnings above); the service stays installed and running."
    return 1
  fi
}
