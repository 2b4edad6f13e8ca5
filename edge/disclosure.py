"""What an unauthenticated caller may learn, and what only the admin token shows.

The OpenAI and health endpoints answer anyone who reaches the port (on a kiosk, every web page the
kiosk's browser shows). They keep what a kiosk needs to act (a status, an error's kind and code) and
leave out what maps the deployment for an attacker: file paths in load errors, the cloud provider's
host in cloud errors, the update repository's URL and last error, and whether someone else asked a
question before (``/v1/route``'s cache verdict). The admin token shows the full detail.
"""

from __future__ import annotations

from typing import Any

from cloud_bridge.errors import CloudError

# A kiosk needs to know what kind of failure it was, not where the upstream lives.
_CLOUD_TEXT = {
    "timeout_connect": "could not connect in time",
    "timeout_ttft": "no first token in time",
    "timeout_gap": "the stream stalled",
    "timeout_total": "the answer took too long",
    "connect": "could not connect",
    "server_error": "the provider answered with a server error",
    "bad_response": "the provider's answer could not be read",
    "upstream_error": "the provider refused the request",
    "too_large": "the provider's answer was too large",
    "auth": "the provider refused the gateway's credentials",
    "rate_limited": "the provider is rate-limiting the gateway",
    "breaker_open": "the provider is failing; calls are paused",
    "no_provider": "no cloud provider is configured",
    "internal": "the cloud bridge failed",
}
UPDATE_PRIVATE = ("repository", "last_error")


def public_cloud_message(exc: CloudError) -> str:
    """A cloud failure as the kiosk sees it: the kind, the provider's status code, never its host."""
    text = _CLOUD_TEXT.get(exc.kind, "the call failed")
    return f"{text} (HTTP {exc.status})" if exc.status else text


def public_load_error(error: str | None) -> str | None:
    """A model load error without its detail (file paths, library messages): the exception's name."""
    if not error:
        return None
    kind = error.split(":", 1)[0].strip()
    return f"{kind}: see the gateway's log" if kind.isidentifier() else "see the gateway's log"


def public_update_status(update: dict[str, Any]) -> dict[str, Any]:
    """The dashboard's update block without the repository URL and the last error."""
    return {k: v for k, v in update.items() if k not in UPDATE_PRIVATE}


__all__ = ["UPDATE_PRIVATE", "public_cloud_message", "public_load_error", "public_update_status"]
