// The operator dashboard: polls /dashboard/data and draws plain SVG. No library, no build step,
// nothing fetched from the internet, so it works on a kiosk network with no way out.
"use strict";
(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const ROUTES = ["edge", "cloud", "cache"];
  const COLORS = { edge: "#2f855a", cloud: "#2b6cb0", cache: "#b7791f", p50: "#4a5568", p99: "#c53030" };
  const REFRESH_MS = 3000;

  function el(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function setText(id, text) { const n = document.getElementById(id); if (n) n.textContent = text; }
  function setValue(id, text, value) {
    const n = document.getElementById(id);
    if (!n) return;
    n.textContent = text;
    n.setAttribute("data-value", String(value));
  }
  function ms(v) {
    if (v === null || v === undefined) return "–";
    if (v >= 1000) return (v / 1000).toFixed(2) + " s";
    return (v < 10 && v !== Math.round(v) ? v.toFixed(1) : String(Math.round(v))) + " ms";
  }
  function usd(v) { return "$" + (v >= 1 ? v.toFixed(2) : v.toFixed(4)); }
  function pct(v, digits) { return (v * 100).toFixed(digits === undefined ? 1 : digits) + "%"; }
  function hhmm(epoch) { const d = new Date(epoch * 1000); return d.toISOString().slice(11, 16); }
  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); }
  function row(cells, cls) {
    const tr = document.createElement("tr");
    cells.forEach(function (c) {
      const td = document.createElement("td");
      td.textContent = c;
      tr.appendChild(td);
    });
    if (cls) tr.className = cls;
    return tr;
  }

  function drawRouteMix(mix) {
    const svg = document.getElementById("route-mix");
    clear(svg);
    const total = ROUTES.reduce(function (s, r) { return s + (mix[r] || 0); }, 0);
    const max = Math.max(1, ...ROUTES.map(function (r) { return mix[r] || 0; }));
    ROUTES.forEach(function (r, i) {
      const y = 10 + i * 36;
      const n = mix[r] || 0;
      const w = Math.round(760 * n / max);
      svg.appendChild(el("text", { x: 0, y: y + 17 }, r));
      svg.appendChild(el("rect", { x: 60, y: y, width: Math.max(w, 1), height: 24, fill: COLORS[r], rx: 3,
        "data-route": r, "data-value": n }));
      const share = total ? " (" + pct(n / total) + ")" : "";
      svg.appendChild(el("text", { x: 66 + w, y: y + 17, id: "mix-" + r, "data-testid": "mix-" + r, "data-value": n },
        String(n) + share));
    });
  }

  function niceMax(v) {
    if (!(v > 0)) return 100;
    const p = Math.pow(10, Math.floor(Math.log10(v)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  function drawTtft(container, route, points, now, windowMin) {
    const W = 1000, H = 180, L = 56, R = 12, T = 12, B = 24;
    const wrap = document.createElement("div");
    wrap.className = "chart";
    const h = document.createElement("h3");
    const last = points.length ? points[points.length - 1] : null;
    h.textContent = route + " — latest P50 " + ms(last && last.p50) + ", P99 " + ms(last && last.p99) +
      " (" + points.reduce(function (s, p) { return s + p.requests; }, 0) + " requests)";
    wrap.appendChild(h);
    const svg = el("svg", { viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "TTFT " + route,
      id: "ttft-" + route, "data-testid": "ttft-" + route });
    const endMin = Math.floor(now / 60) * 60;
    const startMin = endMin - (windowMin - 1) * 60;
    const ymax = niceMax(Math.max(0, ...points.map(function (p) { return p.p99 || 0; })));
    const x = function (m) { return L + (W - L - R) * (m - startMin) / Math.max(60, endMin - startMin); };
    const y = function (v) { return T + (H - T - B) * (1 - v / ymax); };
    for (let i = 0; i <= 4; i++) {
      const v = ymax * i / 4;
      svg.appendChild(el("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), class: "axis" }));
      svg.appendChild(el("text", { x: 2, y: y(v) + 4 }, ms(v)));
    }
    for (let m = startMin; m <= endMin; m += 15 * 60) {
      svg.appendChild(el("text", { x: x(m) - 14, y: H - 6 }, hhmm(m)));
    }
    ["p50", "p99"].forEach(function (q) {
      const pts = points.filter(function (p) { return p[q] !== null && p[q] !== undefined; });
      if (pts.length > 1) {
        svg.appendChild(el("polyline", { fill: "none", stroke: COLORS[q], "stroke-width": q === "p99" ? 2 : 1.5,
          points: pts.map(function (p) { return x(p.minute).toFixed(1) + "," + y(p[q]).toFixed(1); }).join(" ") }));
      }
      pts.forEach(function (p) {
        const c = el("circle", { cx: x(p.minute).toFixed(1), cy: y(p[q]).toFixed(1), r: 3, fill: COLORS[q],
          class: "pt pt-" + q, "data-route": route, "data-quantile": q, "data-minute": p.minute, "data-value": p[q],
          "data-requests": p.requests });
        c.appendChild(el("title", {}, hhmm(p.minute) + " " + q.toUpperCase() + " " + ms(p[q]) + " (" + p.requests + " req)"));
        svg.appendChild(c);
      });
    });
    svg.appendChild(el("text", { x: W - 130, y: 22, fill: COLORS.p99 }, "— P99"));
    svg.appendChild(el("text", { x: W - 70, y: 22, fill: COLORS.p50 }, "— P50"));
    if (!points.length) svg.appendChild(el("text", { x: W / 2 - 40, y: H / 2 }, "no requests"));
    wrap.appendChild(svg);
    container.appendChild(wrap);
  }

  function drawDevice(dev) {
    const body = document.querySelector("#device tbody");
    clear(body);
    if (!dev) return;
    body.appendChild(row(["CPU", dev.cpu_percent === null ? "–" : dev.cpu_percent.toFixed(1) + "%"]));
    if (dev.memory_total_bytes) {
      body.appendChild(row(["Memory", (dev.memory_used_bytes / 1048576).toFixed(0) + " / " +
        (dev.memory_total_bytes / 1048576).toFixed(0) + " MiB"]));
    }
    const t = dev.tegra;
    if (t) {
      if (t.gpu_load_percent !== null) body.appendChild(row(["GPU load", t.gpu_load_percent.toFixed(0) + "%"]));
      if (t.total_power_mw !== null) body.appendChild(row(["Power in", (t.total_power_mw / 1000).toFixed(2) + " W"]));
      Object.keys(t.temperatures_c).sort().forEach(function (k) {
        body.appendChild(row(["Temp " + k, t.temperatures_c[k].toFixed(1) + " °C"]));
      });
    } else {
      body.appendChild(row(["tegrastats", dev.tegrastats]));
    }
  }

  function drawProviders(breakers, providers) {
    const body = document.querySelector("#breakers tbody");
    clear(body);
    const names = Array.from(new Set(Object.keys(breakers || {}).concat(Object.keys(providers || {})))).sort();
    names.forEach(function (n) {
      const pts = (providers || {})[n] || [];
      const last = pts.length ? pts[pts.length - 1] : null;
      const state = (breakers || {})[n] || "–";
      body.appendChild(row([n, state, ms(last && last.p99), last ? pct(last.availability, 2) : "–"],
        state === "open" ? "bad" : ""));
    });
  }

  function drawBreaches(list) {
    const body = document.querySelector("#breaches tbody");
    clear(body);
    if (!list || !list.length) { body.appendChild(row(["none", "", "", "", "", "", "", ""])); return; }
    list.forEach(function (b) {
      body.appendChild(row([b.start.slice(0, 16).replace("T", " "), b.scope, b.name, b.kinds.join(", "),
        String(b.requests), ms(b.ttft_p99_ms), pct(b.availability, 2),
        (b.slowest_ids || []).concat(b.failed_ids || []).slice(0, 3).join(" ")], "bad"));
    });
  }

  function drawKnowledge(k) {
    const panel = document.getElementById("knowledge-panel");
    if (!panel) return;
    panel.hidden = !k;
    if (!k) return;
    setValue("knowledge-version", k.loaded ? (k.name + " " + k.version) : "no pack loaded", k.pack_version || "");
    setText("knowledge-facts", String(k.facts || 0));
    setText("knowledge-hit-ratio", pct(k.hit_ratio || 0));
    setText("knowledge-mode", k.mode || "–");
    setText("knowledge-error", k.last_error ? " · last load refused: " + k.last_error : "");
    const body = document.querySelector("#knowledge-uncovered tbody");
    clear(body);
    (k.uncovered || []).forEach(function (u) { body.appendChild(row([u.question, String(u.count)])); });
    if (!(k.uncovered || []).length) body.appendChild(row(["none yet", ""], "muted"));
  }

  function render(d) {
    setValue("requests-total", String(d.requests.total), d.requests.total);
    setText("requests-errors", String(d.requests.errors));
    setText("requests-rejected", String(d.requests.rejected));
    setValue("hit-ratio", pct(d.cache.hit_ratio), d.cache.hit_ratio);
    setText("cache-hits", String(d.cache.hits));
    setText("cache-misses", String(d.cache.misses));
    setValue("money-saved", usd(d.money.saved_usd), d.money.saved_usd);
    setText("money-spent", usd(d.money.cloud_cost_usd));
    setText("money-all", usd(d.money.all_cloud_usd));
    setValue("model-version", d.model.version || "none", d.model.version || "");
    setText("model-loaded", d.model.loaded ? "loaded" : "not loaded");
    setText("queue-depth", String(d.model.queue_depth));
    const up = d.update || {};
    setValue("update-state", String(up.state || "–"), up.state || "");
    const detail = [];
    if (up.last_result) detail.push("last: " + up.last_result);
    if (up.installed_version !== undefined && up.installed_version !== null) detail.push("bundle " + up.installed_version);
    if (up.last_check) detail.push("checked " + hhmm(up.last_check) + " UTC");
    if (up.last_error) detail.push("error: " + up.last_error);
    setText("update-detail", detail.join(" · "));
    drawRouteMix(d.route_mix);
    const charts = document.getElementById("ttft-charts");
    clear(charts);
    ROUTES.forEach(function (r) { drawTtft(charts, r, d.ttft[r] || [], d.generated_at, d.window_minutes); });
    drawDevice(d.device);
    drawProviders(d.breakers, d.providers);
    drawBreaches(d.breaches);
    drawKnowledge(d.knowledge);
    const s = document.getElementById("status");
    s.textContent = "updated " + new Date(d.generated_at * 1000).toISOString().slice(11, 19) + " UTC";
    s.setAttribute("data-generated-at", String(d.generated_at));
    document.body.setAttribute("data-ready", "1");
  }

  function refresh() {
    fetch("/dashboard/data", { cache: "no-store" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(render)
      .catch(function (e) { setText("status", "update failed: " + e.message); })
      .finally(function () { setTimeout(refresh, REFRESH_MS); });
  }
  refresh();
})();
