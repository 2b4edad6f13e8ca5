"""The one exception the bridge raises, shaped so the gateway can map it to an OpenAI error.

``before_first_token`` is the fact the router needs most: only a failure that happened before
any text reached the kiosk can still be answered by the edge model without the user noticing.
"""

from __future__ import annotations

from typing import Literal

ErrorKind = Literal[
    "rate_limited",
    "server_error",
    "connect",
    "timeout_connect",
    "timeout_ttft",
    "timeout_gap",
    "timeout_total",
    "bad_response",
    "upstream_error",
    "breaker_open",
    "no_provider",
    "too_large",
    "auth",
]

# Kinds worth another attempt at the SAME provider after a back-off. Any failure before the first
# token also fails over to the next provider; a TTFT timeout only does that, because retrying an
# overloaded provider that just took ``ttft_timeout_s`` to say nothing would double the wait.
RETRYABLE_KINDS = frozenset({"rate_limited", "server_error", "connect", "timeout_connect"})
# Kinds that say something about the provider's health, so they count against its breaker.
# Client-side problems (auth, too_large, a 4xx) and our own deadline do not.
BREAKER_KINDS = frozenset(
    {
        "rate_limited",
        "server_error",
        "connect",
        "timeout_connect",
        "timeout_ttft",
        "timeout_gap",
        "bad_response",
    }
)


class CloudError(Exception):
    """A failed cloud call. ``message`` is safe to show a client: it never holds an API key."""

    def __init__(
        self,
        kind: str,
        message: str,
        *,
        status: int | None = None,
        before_first_token: bool = True,
        provider: str | None = None,
        retry_after_s: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.message = message
        self.before_first_token = before_first_token
        self.provider = provider
        self.retry_after_s = retry_after_s
        self.retryable = kind in RETRYABLE_KINDS if retryable is None else retryable

    def __repr__(self) -> str:
        return (
            f"CloudError(kind={self.kind!r}, status={self.status!r}, provider={self.provider!r}, "
            f"before_first_token={self.before_first_token!r}, message={self.message!r})"
        )
