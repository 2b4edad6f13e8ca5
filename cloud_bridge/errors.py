"""The one exception the bridge raises, shaped so the gateway can map it to an OpenAI error.

``before_first_token`` is the fact the router needs most: only a failure that happened before
any text reached the kiosk can still be answered by the edge model without the user noticing.
"""

from __future__ import annotations

from enum import Enum


class CloudErrorKind(str, Enum):
    """Every way a cloud call can fail: the one list the bridge, the gateway and the metrics use.

    A ``str`` enum so a kind compares equal to its text, is a dict key for either, and is written
    to logs, JSON and metric labels as its bare value (``str()`` is overridden: on Python 3.10 a
    mixed-in enum would otherwise print as ``CloudErrorKind.CONNECT``).
    """

    RATE_LIMITED = "rate_limited"
    SERVER_ERROR = "server_error"
    CONNECT = "connect"
    TIMEOUT_CONNECT = "timeout_connect"
    TIMEOUT_TTFT = "timeout_ttft"
    TIMEOUT_GAP = "timeout_gap"
    TIMEOUT_TOTAL = "timeout_total"
    BAD_RESPONSE = "bad_response"
    UPSTREAM_ERROR = "upstream_error"
    BREAKER_OPEN = "breaker_open"
    NO_PROVIDER = "no_provider"
    TOO_LARGE = "too_large"
    AUTH = "auth"

    def __str__(self) -> str:
        return self.value


K = CloudErrorKind
# Kinds worth another attempt at the SAME provider after a back-off. Any failure before the first
# token also fails over to the next provider; a TTFT timeout only does that, because retrying an
# overloaded provider that just took ``ttft_timeout_s`` to say nothing would double the wait.
RETRYABLE_KINDS = frozenset({K.RATE_LIMITED, K.SERVER_ERROR, K.CONNECT, K.TIMEOUT_CONNECT})
# Kinds that say something about the provider's health, so they count against its breaker.
# Client-side problems (auth, too_large, a 4xx) and our own deadline do not.
BREAKER_KINDS = frozenset(
    {K.RATE_LIMITED, K.SERVER_ERROR, K.CONNECT, K.TIMEOUT_CONNECT, K.TIMEOUT_TTFT, K.TIMEOUT_GAP, K.BAD_RESPONSE}
)
# Failures the provider answers for under its SLA (the gateway's availability figures): a rate
# limit is the provider keeping its terms, and auth, size and client errors are the caller's.
PROVIDER_FAULT_KINDS = frozenset(
    {K.SERVER_ERROR, K.CONNECT, K.TIMEOUT_CONNECT, K.TIMEOUT_TTFT, K.TIMEOUT_GAP, K.TIMEOUT_TOTAL, K.BAD_RESPONSE}
)
del K


class CloudError(Exception):
    """A failed cloud call. ``message`` is safe to show a client: it never holds an API key."""

    def __init__(
        self,
        kind: CloudErrorKind | str,
        message: str,
        *,
        status: int | None = None,
        before_first_token: bool = True,
        provider: str | None = None,
        retry_after_s: float | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = CloudErrorKind(kind)  # an unknown kind is a bug here, not a new category downstream
        self.status = status
        self.message = message
        self.before_first_token = before_first_token
        self.provider = provider
        self.retry_after_s = retry_after_s
        self.retryable = self.kind in RETRYABLE_KINDS if retryable is None else retryable

    def __repr__(self) -> str:
        return (
            f"CloudError(kind={self.kind.value!r}, status={self.status!r}, provider={self.provider!r}, "
            f"before_first_token={self.before_first_token!r}, message={self.message!r})"
        )
