"""Money: what the cloud cost, and what the edge and the cache saved.

Every answer the edge or the cache gives is an answer the cloud did not have to give, so its
tokens are priced at the reference provider's rates (the first configured provider, else the
default table in ``MetricsConfig``). ``UsageTotals`` is additive, so per-minute rows on disk
sum to any period the ``edgecloud report`` asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from edge.records import RequestRecord

ROUTES = ("edge", "cloud", "cache")
REJECTED = "rejected"  # usage key for requests refused before routing (route "")


@dataclass(frozen=True)
class Prices:
    input_per_mtok: float
    output_per_mtok: float

    def cost(self, prompt_tokens: int, completion_tokens: int) -> float:
        return (prompt_tokens * self.input_per_mtok + completion_tokens * self.output_per_mtok) / 1_000_000.0


@dataclass(frozen=True)
class PriceBook:
    """The reference price (what an avoided cloud answer would have cost) and each provider's price."""

    reference: Prices
    providers: Mapping[str, Prices]
    reference_name: str

    @classmethod
    def from_settings(cls, settings: Any) -> PriceBook:
        providers = {
            p.name: Prices(float(p.price_input_per_mtok), float(p.price_output_per_mtok))
            for p in settings.cloud.providers
        }
        if settings.cloud.providers:
            first = settings.cloud.providers[0]
            return cls(providers[first.name], providers, first.name)
        m = settings.metrics
        default = Prices(
            float(getattr(m, "default_price_input_per_mtok", 0.15)),
            float(getattr(m, "default_price_output_per_mtok", 0.60)),
        )
        return cls(default, providers, "default")

    def for_provider(self, name: str | None) -> Prices:
        return self.providers.get(name or "", self.reference)


@dataclass(slots=True)
class UsageTotals:
    """Additive counters for one route over any span of time."""

    requests: int = 0
    ok: int = 0
    errors: int = 0
    rejected: int = 0
    cancelled: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0  # paid to the cloud
    avoided_usd: float = 0.0  # what the cloud would have charged for edge and cache answers
    cache_hits: int = 0
    cache_misses: int = 0

    def add(self, other: UsageTotals) -> None:
        # Spelled out: this runs twice per request, and a loop over fields() costs several times more.
        self.requests += other.requests
        self.ok += other.ok
        self.errors += other.errors
        self.rejected += other.rejected
        self.cancelled += other.cancelled
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cost_usd += other.cost_usd
        self.avoided_usd += other.avoided_usd
        self.cache_hits += other.cache_hits
        self.cache_misses += other.cache_misses

    def copy(self) -> UsageTotals:
        return UsageTotals(**asdict(self))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> UsageTotals:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def usage_key(rec: RequestRecord) -> str:
    return rec.route if rec.route in ROUTES else REJECTED


def usage_of(rec: RequestRecord, book: PriceBook) -> UsageTotals:
    """One request's contribution; failed answers still count the tokens the cloud billed."""
    u = UsageTotals(requests=1, prompt_tokens=rec.prompt_tokens, completion_tokens=rec.completion_tokens)
    if rec.outcome == "ok":
        u.ok = 1
    elif rec.outcome == "rejected":
        u.rejected = 1
    elif rec.outcome == "cancelled":
        u.cancelled = 1
    else:
        u.errors = 1
    if rec.route == "cloud":
        u.cost_usd = book.for_provider(rec.provider).cost(rec.prompt_tokens, rec.completion_tokens)
    elif rec.route in ("edge", "cache") and rec.outcome in ("ok", "cancelled"):
        u.avoided_usd = book.reference.cost(rec.prompt_tokens, rec.completion_tokens)
    if rec.cache == "hit":
        u.cache_hits = 1
    elif rec.cache in ("miss", "store"):  # "store": looked up, missed, then stored the answer
        u.cache_misses = 1
    return u


def cost_report(per_route: Mapping[str, UsageTotals]) -> dict[str, Any]:
    """Requests, tokens and money by route, the hit ratio, and the all-cloud comparison."""
    total = UsageTotals()
    routes: dict[str, dict[str, Any]] = {}
    for name in (*ROUTES, REJECTED):
        u = per_route.get(name, UsageTotals())
        total.add(u)
        routes[name] = u.to_dict()
    looked_up = total.cache_hits + total.cache_misses
    answered = sum(per_route.get(r, UsageTotals()).requests for r in ROUTES)
    all_cloud = total.cost_usd + total.avoided_usd
    return {
        "routes": routes,
        "total": total.to_dict(),
        "cache_hit_ratio": (total.cache_hits / looked_up) if looked_up else 0.0,
        "cache_share": (per_route.get("cache", UsageTotals()).requests / answered) if answered else 0.0,
        "edge_share": (per_route.get("edge", UsageTotals()).requests / answered) if answered else 0.0,
        "actual_cost_usd": total.cost_usd,
        "saved_usd": total.avoided_usd,
        "all_cloud_cost_usd": all_cloud,
        "saved_ratio": (total.avoided_usd / all_cloud) if all_cloud else 0.0,
    }


def sum_usage(rows: Iterable[tuple[str, Mapping[str, Any]]]) -> dict[str, UsageTotals]:
    out: dict[str, UsageTotals] = {}
    for name, data in rows:
        out.setdefault(name, UsageTotals()).add(UsageTotals.from_dict(data))
    return out
