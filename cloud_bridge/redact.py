"""Keep API keys out of logs, exceptions, metrics and diagnose output.

Upstreams echo keys back ("Incorrect API key provided: sk-...") and some put them in the URL
(``?key=``), so every string that leaves the bridge passes through :class:`Redactor`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

# One pass over the text: each alternative's one group is its label ("Authorization: ", "key="),
# kept; what follows it is masked. Case-insensitive throughout.
_CREDENTIAL = re.compile(
    r"(?i)(authorization\s*[:=]\s*)(?:bearer\s+)?[^\s,;\"']+"
    r"|(bearer\s+)[A-Za-z0-9._~+/=-]+"
    r"|((?:x-)?api-key\s*[:=]\s*)[^\s,;\"']+"
    r"|((?:api[_-]?)?key=)[^&\s\"']+"
    r"|(\btoken=)[^&\s\"']+"
    r"|()\bsk-[A-Za-z0-9_-]{6,}"
)
MASK = "[redacted]"
URL_MASK = "***"  # inside URLs: brackets would be percent-encoded


def _may_hold_credential(text: str) -> bool:
    """A cheap test first (most logged strings are short words): every alternative above needs one
    of these, in any case."""
    low = text.lower()
    return "=" in low or ":" in low or "sk-" in low or "bearer" in low


class Redactor:
    """Masks the configured secrets verbatim, then anything shaped like a credential.

    The one redactor of the project: the cloud bridge's errors and log filter, the gateway's log
    redaction, its request log lines and its dashboard all use it. Shapes: an ``Authorization``
    header's value, a bearer token, ``key=``/``api_key=``/``api-key=``/``token=`` values, an
    ``api-key:``/``x-api-key:`` header's value and ``sk-`` keys. The label stays ("key=[redacted]"),
    so a reader still sees what was removed. Secrets shorter than 4 characters are ignored: masking
    them would garble ordinary words.
    """

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self.secrets = sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True)

    def add(self, secret: str | None) -> None:
        if secret and len(secret) >= 4 and secret not in self.secrets:
            self.secrets = sorted([*self.secrets, secret], key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            if secret in text:
                text = text.replace(secret, MASK)
        if _may_hold_credential(text):
            text = _CREDENTIAL.sub(_keep_label, text)
        return text

    def clean(self, value: Any) -> Any:
        """``value`` (plain JSON data) with every string redacted; dict keys become strings."""
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {str(k): self.clean(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.clean(v) for v in value]
        return value


def _keep_label(match: re.Match[str]) -> str:
    return (match.group(match.lastindex) if match.lastindex else "") + MASK


_SECRET_PARAM = re.compile(r"(?i)key|token|secret|sig|pass|auth|credential|code")


def url_secrets(url: str) -> list[str]:
    """The secret parts of a URL: its password and its key-like query values (a user name is not one:
    masking a common word like "kiosk" everywhere would garble logs)."""
    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
        found += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if _SECRET_PARAM.search(k)]
    except ValueError:
        return []
    return [s for s in found if s]


def provider_secrets(cfg: Any) -> list[str]:
    """Every secret a provider's config holds: its key, its extra headers' values, its URL's secrets."""
    found = [cfg.resolved_api_key() or ""]
    found += [str(v) for v in (cfg.extra_headers or {}).values()]
    found += url_secrets(cfg.base_url or "")
    return [s for s in found if s]


def safe_url(url: str) -> str:
    """A URL fit for logs: no user:password, and the value of any key-like query parameter masked."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    query = parts.query
    if query:
        pairs = [
            (k, URL_MASK if _SECRET_PARAM.search(k) else v)
            for k, v in parse_qsl(query, keep_blank_values=True)
        ]
        query = urlencode(pairs, safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


class RedactingFilter(logging.Filter):
    """Rewrites records of third-party loggers (httpx logs every request URL at INFO)."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self._redactor = redactor

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is not ours to fix
            return True
        cleaned = self._redactor(message)
        if cleaned != message:
            record.msg, record.args = cleaned, ()
        return True
