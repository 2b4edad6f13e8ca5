"""What observability costs the gateway: per request, per scrape, per dashboard poll, per minute.

``observe_request`` runs on the event loop once per finished request, so its CPU time is taken
from every other request; the scrape, the dashboard feed and the minute roll-up run far less
often. Measured in CPU time of this process (``time.process_time``), so other work on a shared
machine does not inflate the figures. Prints them and writes
``bench/results/observability_overhead.json``.

    .venv/bin/python -m bench.observability_overhead [--requests 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import logging
import tempfile
import time
from pathlib import Path

from edge.config import Settings
from edge.logs import JsonFormatter
from edge.observability import Observability
from edge.observability.logs import REQUEST_LOGGER
from edge.observability.web import dashboard_data
from edge.records import RequestRecord

RESULTS = Path(__file__).resolve().parent / "results"
ROUTES = ("edge", "cloud", "cache")


def _records(n: int, start: float) -> list[RequestRecord]:
    return [
        RequestRecord(
            request_id=f"bench-{i}", started_at=start + i * 3600.0 / n, route=ROUTES[i % 3],
            reason="classifier:simple:0.91", cache="miss", ttft_ms=80.0 + i % 900, total_ms=1200.0,
            queue_ms=5.0, prompt_tokens=60, completion_tokens=40, tokens_per_s=30.0,
            provider="acme" if i % 3 == 1 else None,
        )
        for i in range(n)
    ]


def _per_request_us(obs: Observability, recs: list[RequestRecord]) -> float:
    t = time.process_time()
    for r in recs:
        obs.observe_request(r)
    return (time.process_time() - t) / len(recs) * 1e6


def run(requests: int) -> dict[str, float]:
    data_dir = Path(tempfile.mkdtemp(prefix="obs-bench-"))
    settings = Settings.model_validate({
        "server": {"data_dir": str(data_dir)},
        "cloud": {"providers": [{"name": "acme", "base_url": "http://127.0.0.1:9"}]},
        "metrics": {"tegrastats_cmd": ["edgecloud-no-tegrastats"]},
    })
    obs = Observability(settings)
    now = time.time()
    logger = logging.getLogger(REQUEST_LOGGER)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    logger.disabled = True
    out: dict[str, float] = {"requests": requests}
    _per_request_us(obs, _records(2000, now - 3600))  # warm: label children, buckets
    out["observe_request_us_no_log"] = _per_request_us(obs, _records(requests, now - 3600))
    logger.disabled = False
    handler = logging.StreamHandler(io.StringIO())
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    out["observe_request_us_json_log"] = _per_request_us(obs, _records(requests, now - 3600))
    logger.removeHandler(handler)

    t = time.process_time()
    rows = asyncio.run(obs.flush(now=now))
    out["rollup_hour_ms"] = (time.process_time() - t) * 1e3
    out["rollup_rows"] = len(rows)
    t = time.process_time()
    for _ in range(50):
        body, _ = obs.render_metrics()
    out["render_metrics_ms"] = (time.process_time() - t) / 50 * 1e3
    out["metrics_bytes"] = len(body)
    t = time.process_time()
    for _ in range(50):
        data = dashboard_data(obs)
    out["dashboard_data_ms"] = (time.process_time() - t) / 50 * 1e3
    out["dashboard_bytes"] = len(json.dumps(data))
    out["store_bytes"] = obs.store.size_bytes()
    out["store_bytes_per_row"] = out["store_bytes"] / max(1, len(obs.store.query()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    args = parser.parse_args(argv)
    result = run(args.requests)
    print(f"observe_request, no log handler     {result['observe_request_us_no_log']:8.1f} us CPU/request")
    print(f"observe_request, JSON log line      {result['observe_request_us_json_log']:8.1f} us CPU/request")
    print(f"roll-up of one hour ({result['rollup_rows']} rows)    {result['rollup_hour_ms']:8.1f} ms CPU")
    print(f"render /metrics ({result['metrics_bytes']} bytes)   {result['render_metrics_ms']:8.2f} ms CPU")
    print(f"dashboard data ({result['dashboard_bytes']} bytes)   {result['dashboard_data_ms']:8.2f} ms CPU")
    print(f"SLA store                           {result['store_bytes_per_row']:8.0f} bytes/row")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "observability_overhead.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
