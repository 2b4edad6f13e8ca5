"""The router's decision time: everything the gateway does before it calls a backend.

Per request: validate the body (``parse_chat_request``), the cache policy and a lookup (a miss),
count the prompt's tokens with the model's tokenizer, run the ONNX intent classifier and the
policy. Two kinds of traffic, each reported on its own:

* ``kiosk``: kiosk-length requests (the single-turn rows of the kiosk data shipped in
  ``models/intent/data``, English and Chinese, up to 600 characters). The classifier reads all of such
  a request, so this is the fast path every kiosk question takes; its target is P99 <= 1 ms.
* ``all``: the kiosk requests plus long rows (601 to 2,000 characters: pasted documents, code, exam
  questions) from the shipped benchmark traffic ``bench/data/routing``, and from every ``--dataset-dir``
  given (for example the shared routing data); target P99 <= 5 ms.

By default half the requests are long rows, interleaved with the kiosk ones, so the kiosk P99 is that of a
mixed stream, in which a long paste decided between two kiosk questions may evict the classifier's weights
from the CPU caches. ``--long-share 0`` measures a kiosk's own traffic alone (kiosk-length requests only).

The gateway is configured with a cloud, as a kiosk gateway is (its address, on 127.0.0.1, is never called:
the decision only asks whether the cloud may take a request). ``--no-cloud`` measures an offline gateway,
which counts every long paste's tokens: without a cloud a paste's size decides between a degraded edge answer
and a refusal, where with one a paste the classifier calls complex goes to the cloud uncounted
(``Router.decide``). On the 2-vCPU development VM the offline mix's kiosk P99 is the highest of the three, by
0.2-0.8 ms over kiosk traffic alone: the paste's exact token count (llama.cpp's tokenizer) evicts what the next
kiosk request needs (docs/intent.md, *Latency*).

``--busy-cores N`` holds N cores with busy-loop processes while it measures (``--busy-nice K`` runs them at
nice K): a stand-in for llama.cpp decoding another kiosk's answer on every core, which is what a request decided
during a decode competes with. On the 2-vCPU development VM both cores held put the kiosk P99 at 4.5-4.8 ms, the
same loops at nice 10 at 0.55-0.76 ms (docs/intent.md, *Latency*).

``--decode`` is the real thing instead: the gateway's own edge model (the embedded model unless configured)
answers one stream after another on every core, in the same process, while the requests are decided, and the
report gives the decode's tokens per second beside the decision's times. On the 2-vCPU development VM the
kiosk P99 was 0.74-0.96 ms beside a real decode (idle 0.42 ms): busy loops overstate what a decode costs the
decision (docs/intent.md, *Latency*). ``--edge-threads N`` sets ``[edge] n_threads`` (and ``n_threads_batch``),
to see what leaving a core to the event loop buys the decision and costs the decode (there: one thread, P99
0.51-0.61 ms and 85-87 tok/s, against 0.66-0.90 ms and 92-116 tok/s on both cores).

With the classifier's encoder stage, a request the n-gram stage is unsure of has two times: ``decide`` (and
``total``) runs until the backend that answers is called, which is at the n-gram stage's decision where that
backend starts early (``[router] early_start``, ``--early-start``; ``Pipeline.decide_timed``), and ``decided``
until the final decision is known. ``--kiosk-dir DIR`` draws the kiosk-length requests from held-out sets (text
the router never trained on) instead of its training rows, on which the n-gram stage is rarely unsure.
``--no-encoder`` runs the n-gram stage alone.

Prints P50/P99 per stage and kind and writes ``bench/results/route_overhead.json``.

    .venv/bin/python -m bench.route_overhead [--requests 3000] [--long-share 0.5] [--no-cloud]
        [--busy-cores N [--busy-nice K]] [--decode [--edge-threads N]] [--kiosk-dir DIR ...]
        [--early-start both|route|off] [--no-encoder]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.edge_overhead import QUESTIONS
from bench.percentile import percentile

RESULTS = Path(__file__).resolve().parent / "results"
SHIPPED_TRAFFIC = Path(__file__).resolve().parent / "data" / "routing"
KIOSK_DATA = Path(__file__).resolve().parent.parent / "models" / "intent" / "data"


def _texts(paths: list[Path], max_chars: int) -> list[str]:
    out: list[str] = []
    for path in paths:
        with path.open(encoding="utf-8") as fh:  # not splitlines(): texts may hold U+2028
            rows = [json.loads(line) for line in fh if line.strip()]
        out += [row["text"] for row in rows if "messages" not in row and len(row["text"]) <= max_chars]
    return out


def kiosk_texts(kiosk_dirs: tuple[Path, ...] = ()) -> list[str]:
    """The fast path's texts, up to 600 characters: the single-turn kiosk rows shipped in ``models/intent/data``
    (the router's training texts), or those of the ``*.jsonl`` files in ``kiosk_dirs`` (held-out sets)."""
    if kiosk_dirs:
        return _texts([p for d in kiosk_dirs for p in sorted(Path(d).glob("*.jsonl"))], 600)
    return _texts(sorted(KIOSK_DATA.glob("kiosk_*.jsonl")), 600)


def share_of_long_rows(value: float | str) -> float:
    """A share of long rows, within [0, 1]; else ValueError (which argparse reports as a bad option value)."""
    share = float(value)
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"long_share must be within [0, 1], got {share}")
    return share


def load_texts(limit: int, seed: int = 7, extra_dirs: tuple[Path, ...] = (),
               long_share: float = 0.5, kiosk_dirs: tuple[Path, ...] = ()) -> list[tuple[str, str]]:
    """``limit`` requests as (kind, text): kiosk-length rows, and long rows (shipped traffic and ``extra_dirs``)
    as ``long_share`` of them, spread evenly (0.5: every other request)."""
    long_share = share_of_long_rows(long_share)
    kiosk = kiosk_texts(kiosk_dirs) or list(QUESTIONS)
    long = _texts([p for d in (SHIPPED_TRAFFIC, *extra_dirs) for p in sorted(Path(d).glob("*.jsonl"))], 2000)
    long = [t for t in long if len(t) > 600]
    rng = random.Random(seed)
    out: list[tuple[str, str]] = []
    for i in range(limit):  # request i is long when the running count of long ones steps up
        is_long = bool(long) and int((i + 1) * long_share) > int(i * long_share)
        out.append(("long", rng.choice(long)) if is_long else ("kiosk", rng.choice(kiosk)))
    return out


@contextmanager
def busy_loops(n: int, nice: int = 0) -> Iterator[list[subprocess.Popen]]:
    """``n`` processes that spin on a core each (at ``nice``) for as long as the block runs; killed on exit."""
    code = f"import os\nos.nice({int(nice)})\nwhile True:\n    pass\n"
    procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def uncalled_cloud() -> dict:
    """A cloud section the gateway may route to; nothing connects to it (no warm-up, no keep-alive, no call),
    and its address is a closed port on 127.0.0.1 (``bench.fake_cloud.refused_base_url``)."""
    from bench.fake_cloud import refused_base_url

    return {"providers": [{"name": "bench", "base_url": refused_base_url()}], "warmup": False, "keep_warm": False}


# With --decode, the time between two requests. Back to back, the decisions' Python would hold the GIL that the
# decode's Python between two llama.cpp calls needs, and the decode would all but stop.
DECODE_GAP_S = 0.002


class Decoder:
    """Streams one answer after another from the gateway's edge model until stopped.

    The answers are long (a story, ``max_tokens`` 256), so a decode is under way for all but a prefill's
    share of the time. Its speed is the batch runner's steps per second over the measured window: with one
    stream each step decodes one token (a prompt's prefill, one step in a few hundred, counts as one too)."""

    def __init__(self, services, settings) -> None:
        self.services, self.settings = services, settings
        self.answers = 0
        self.steps = 0
        self.seconds = 0.0
        self._start: tuple[float, int] = (0.0, 0)
        self._task: asyncio.Task | None = None

    async def _loop(self) -> None:
        from edge.schemas import parse_chat_request

        i = 0
        while True:
            i += 1
            req = parse_chat_request({"model": "edgecloud-edge", "max_tokens": 256, "temperature": 0.8, "messages": [
                {"role": "user", "content": f"Tell me a long story about a lighthouse keeper, part {i}."}]},
                self.settings, {})
            async for _event in self.services.edge.generate(req):
                pass
            self.answers += 1

    async def start(self) -> None:
        """Start decoding; return once the first answer is past its prefill and decoding."""
        self._task = asyncio.create_task(self._loop())
        steps0 = self.services.edge.batch_counts()[0]
        while self.services.edge.batch_counts()[0] < steps0 + 5:
            await asyncio.sleep(0.02)
            if self._task.done():
                self._task.result()
        self._start = (time.perf_counter(), self.services.edge.batch_counts()[0])

    async def stop(self) -> None:
        t0, steps0 = self._start
        self.seconds = time.perf_counter() - t0
        self.steps = self.services.edge.batch_counts()[0] - steps0
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    def report(self) -> dict:
        return {"answers_finished": self.answers, "steps": self.steps, "seconds": round(self.seconds, 3),
                "tokens_per_s": round(self.steps / self.seconds, 2) if self.seconds else None}


async def measure(n: int, extra_dirs: tuple[Path, ...] = (), intent_model_dir: Path | None = None,
                  long_share: float = 0.5, cloud: bool = True, decode: bool = False,
                  edge_threads: int | None = None, encoder: bool = True,
                  kiosk_dirs: tuple[Path, ...] = (), early_start: str = "both") -> dict:
    from edge.assembly import build_services
    from edge.config import Settings

    with tempfile.TemporaryDirectory() as tmp:
        config: dict = {"server": {"data_dir": tmp}, "metrics": {"enabled": False}}
        if edge_threads is not None:
            config["edge"] = {"n_threads": edge_threads, "n_threads_batch": edge_threads}
        if cloud:
            config["cloud"] = uncalled_cloud()
        config["router"] = {"intent_encoder": encoder, "early_start": early_start}
        if intent_model_dir is not None:  # another classifier (e.g. the model before), all else as shipped
            config["router"]["intent_model_dir"] = str(intent_model_dir)
        settings = Settings.model_validate(config)
        services = build_services(settings)
        await services.start()
        await services.loaded.wait()
        if cloud and not services.pipeline.live_state().cloud_available:
            raise RuntimeError("the benchmark's cloud is not available to the router")
        from edge.schemas import parse_chat_request

        pipeline, cache = services.pipeline, services.cache
        texts = load_texts(n, extra_dirs=extra_dirs, long_share=long_share, kiosk_dirs=kiosk_dirs)
        # decide/total: until the backend that answers is called (at the n-gram stage's decision where that backend
        # started early, Pipeline._refine_while_starting); decided: until the final decision is known
        stages: dict[str, list[float]] = {"parse": [], "cache": [], "decide": [], "total": [], "decided": []}
        early = {"kept": 0, "switched": 0}
        kinds: list[str] = []
        deciders: list[str] = []  # "encoder" where the classifier's second stage ran
        routes: dict[str, int] = {}
        decoder = Decoder(services, settings) if decode else None
        if decoder is not None:
            await decoder.start()
        for i, (kind, text) in enumerate(texts):
            kinds.append(kind)
            # Each request unique (no cache entry, no memo can answer it), by its system prompt: a mark in the
            # user's text would be read by the classifier and make it less sure than of the kiosk's own text.
            body = {"model": "edgecloud-auto", "messages": [
                {"role": "system", "content": f"You are a mall kiosk. #{i}"}, {"role": "user", "content": text}]}
            t0 = time.perf_counter()
            req = parse_chat_request(body, settings, {})
            t1 = time.perf_counter()
            if cache is not None:
                policy = cache.policy(req)
                if policy.read:
                    cache.lookup(req, policy)
            t2 = time.perf_counter()
            timed = pipeline.decide_timed(req)
            decision = timed.decision
            before = (t2 - t0) * 1000.0
            for name, value in (("parse", (t1 - t0) * 1000.0), ("cache", (t2 - t1) * 1000.0),
                                ("decide", timed.backend_ms), ("total", before + timed.backend_ms),
                                ("decided", before + timed.final_ms)):
                stages[name].append(value)
            routes[decision.route] = routes.get(decision.route, 0) + 1
            deciders.append(decision.classifier_stage or "none")
            if timed.early_start is not None:
                early[timed.early_start] += 1
            if decoder is not None:  # requests arrive apart, as a kiosk's do; the decode runs in between
                await asyncio.sleep(DECODE_GAP_S)
        if decoder is not None:
            await decoder.stop()
        await services.aclose()
    def summary(select: str | None, stage: str | None = None, exclude_stage: str | None = None) -> dict:
        out = {}
        for name, values in stages.items():
            v = [x for x, k, d in zip(values, kinds, deciders, strict=True)
                 if (select is None or k == select) and (stage is None or d == stage)
                 and (exclude_stage is None or d != exclude_stage)]
            if v:
                out[name] = {"n": len(v), "p50_ms": percentile(v, 50), "p99_ms": percentile(v, 99), "max_ms": max(v)}
        return out

    data = ("kiosk rows of " + ", ".join(str(d) for d in kiosk_dirs) if kiosk_dirs
            else "kiosk rows of models/intent/data")
    if long_share > 0:
        data += f" + long rows ({long_share:.0%}) of " + ", ".join(str(d) for d in ("bench/data/routing", *extra_dirs))
    return {"requests": n, "long_share": long_share, "cloud": "configured, never called" if cloud else "none",
            "stages": summary(None), "kiosk": summary("kiosk"), "routes": routes,
            # the fast path: kiosk-length requests the n-gram stage decided; the encoder's own requests apart
            "kiosk_fast_path": summary("kiosk", exclude_stage="encoder"), "encoder_decided": summary(None, "encoder"),
            "encoder_share": round(deciders.count("encoder") / max(1, len(deciders)), 4),
            "early_start": {**early, "switched_share": round(early["switched"] / max(1, len(deciders)), 4)},
            "targets": {"kiosk_total_p99_ms": 1.0, "all_total_p99_ms": 5.0},
            "classifier": type(services.classifier).__name__ if services.classifier else None,
            "intent_model": services.classifier.version if services.classifier else None,
            "encoder_stage": bool(services.classifier is not None and services.classifier.encoder is not None),
            "data": data, "decode": decoder.report() if decoder is not None else None,
            "edge_threads": settings.edge.n_threads, "early_start_mode": early_start}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--out", type=Path, default=RESULTS / "route_overhead.json")
    parser.add_argument("--dataset-dir", type=Path, action="append", default=[], metavar="DIR",
                        help="more routing *.jsonl folders to draw long rows from (e.g. the shared routing data)")
    parser.add_argument("--intent-model-dir", type=Path, default=None, metavar="DIR",
                        help="the classifier to decide with (intent.onnx + card.json; default: the shipped one)")
    parser.add_argument("--long-share", type=share_of_long_rows, default=0.5, metavar="F",
                        help="share of long rows interleaved with the kiosk ones, within [0, 1] (default 0.5; "
                             "0: kiosk traffic alone)")
    parser.add_argument("--no-cloud", action="store_true",
                        help="an offline gateway: no cloud configured, so every long paste's tokens are counted")
    parser.add_argument("--busy-cores", type=int, default=0, metavar="N",
                        help="hold N cores with busy loops while measuring (a stand-in for a decode on them)")
    parser.add_argument("--busy-nice", type=int, default=0, metavar="K", help="the busy loops' nice value")
    parser.add_argument("--decode", action="store_true",
                        help="the gateway's edge model decodes one answer after another while measuring")
    parser.add_argument("--no-encoder", action="store_true",
                        help="[router] intent_encoder = false: the n-gram stage decides every request alone")
    parser.add_argument("--early-start", choices=("both", "route", "off"), default="both",
                        help="[router] early_start: which backends start while the encoder decides (default both)")
    parser.add_argument("--kiosk-dir", type=Path, action="append", default=[], metavar="DIR",
                        help="draw the kiosk-length requests from these *.jsonl folders (e.g. a held-out set, "
                             "text the router never trained on) instead of models/intent/data's training rows")
    parser.add_argument("--edge-threads", type=int, default=None, metavar="N",
                        help="[edge] n_threads for the edge model (default: as shipped, every core)")
    args = parser.parse_args(argv)
    if args.edge_threads is not None and args.edge_threads < 1:
        parser.error("--edge-threads must be at least 1")
    if args.busy_cores < 0 or not 0 <= args.busy_nice <= 19:
        parser.error("--busy-cores must be at least 0 and --busy-nice within 0-19")
    with busy_loops(args.busy_cores, args.busy_nice):
        report = asyncio.run(measure(args.requests, tuple(args.dataset_dir), args.intent_model_dir,
                                     args.long_share, cloud=not args.no_cloud, decode=args.decode,
                                     edge_threads=args.edge_threads, encoder=not args.no_encoder,
                                     kiosk_dirs=tuple(args.kiosk_dir), early_start=args.early_start))
    report["machine"] = {"cpus": os.cpu_count()}
    report["busy_loops"] = {"cores": args.busy_cores, "nice": args.busy_nice}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    print(f"{report['requests']} requests ({report['data']}; cloud: {report['cloud']}), routes {report['routes']}"
          + (f", {args.busy_cores} core(s) held by busy loops at nice {args.busy_nice}" if args.busy_cores else ""))
    if report["decode"] is not None:
        d = report["decode"]
        threads = report["edge_threads"] or "every core"
        print(f" while the edge model decoded ({threads} threads): {d['steps']} tokens in {d['seconds']:.1f} s, "
              f"{d['tokens_per_s']} tok/s")
    sections = [("kiosk-length requests (fast path; target P99 <= 1 ms)", "kiosk"),
                ("all requests (target P99 <= 5 ms)", "stages")]
    if report["encoder_decided"]:
        sections = [("kiosk-length requests the n-gram stage decided (fast path; target P99 <= 1 ms)",
                     "kiosk_fast_path"), ("kiosk-length requests, both stages", "kiosk"),
                    (f"requests the encoder decided ({report['encoder_share']:.1%} of all)", "encoder_decided"),
                    ("all requests (target P99 <= 5 ms)", "stages")]
    if report["encoder_decided"]:
        e = report["early_start"]
        print(f" early start ({report['early_start_mode']}): the backend that answers had started early for "
              f"{e['kept']}, not for {e['switched']} ({e['switched_share']:.2%} of all requests wait for the encoder)")
        print("  decide/total: until the backend that answers is called; decided: until the final decision")
    for title, key in sections:
        print(f" {title}:")
        for name, s in report[key].items():
            print(f"  {name:8} p50 {s['p50_ms']:.3f} ms   p99 {s['p99_ms']:.3f} ms   max {s['max_ms']:.3f} ms"
                  f"   (n={s['n']})")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
