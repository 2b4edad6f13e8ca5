"""Back-off, Retry-After parsing and the retry budget.

Retries without a budget turn a provider's brown-out into a retry storm; the token bucket
(as in Envoy / gRPC retry throttling) caps retries at ``ratio`` of first attempts.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Mapping


def full_jitter_backoff(retry_index: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """AWS "full jitter": uniform in [0, min(cap, base * 2**n)], so clients do not retry in step."""
    return rng.uniform(0.0, min(cap_s, base_s * (2**retry_index)))


def parse_retry_after(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """Seconds to wait, from ``retry-after-ms`` (finer, preferred) or ``Retry-After`` (seconds or date)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            value = float(raw_ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    raw = raw.strip()
    try:
        return max(0.0, float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    current = time.time() if now is None else now
    return max(0.0, when.timestamp() - current)


class RetryBudget:
    """Token bucket: each first attempt deposits ``ratio``, each retry withdraws one token.

    Starts full (``initial`` = ``capacity`` tokens) so a quiet kiosk can still retry a short burst
    of failures; in a long outage retries settle at ``ratio`` of the traffic instead of multiplying it.
    """

    def __init__(self, ratio: float = 0.2, capacity: float = 10.0, initial: float = 10.0) -> None:
        self.ratio = ratio
        self.capacity = capacity
        self.tokens = min(capacity, initial)

    def on_request(self) -> None:
        self.tokens = min(self.capacity, self.tokens + self.ratio)

    def try_retry(self) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False
