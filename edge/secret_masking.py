"""Every secret the settings hold, for masking printed config and redacting logs.

Secret-typed fields (``SecretStr``) are not the only secrets an operator configures: a password in
``[fleet] repository_url``, a ``?key=`` in a provider's ``base_url`` and the values of its
``extra_headers`` are secrets too, and ``edgecloud serve --print-config`` is what SECURITY.md asks
reporters to paste. :func:`configured_secrets` collects them all; :func:`mask_tree` removes them
from plain data, and :func:`install_log_redaction` from every log line the gateway writes.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from cloud_bridge.redact import RedactingFilter, Redactor, provider_secrets, url_secrets

if TYPE_CHECKING:
    from .config import Settings

MASK = "**********"


def configured_secrets(settings: Settings) -> list[str]:
    """The admin token, every provider's key, header values and URL secrets, the fleet URL's secrets."""
    found: list[str] = []
    if settings.server.admin_token is not None:
        found.append(settings.server.admin_token.get_secret_value())
    for provider in settings.cloud.providers:
        found += provider_secrets(provider)
    found += url_secrets(settings.fleet.repository_url)
    return sorted({s for s in found if s}, key=len, reverse=True)


def mask_tree(tree: Any, secrets: list[str]) -> Any:
    """``tree`` (plain JSON data) with every occurrence of a secret replaced by ``**********``, and
    every value under an ``extra_headers`` key masked whole (short values included)."""
    if isinstance(tree, dict):
        return {k: ({h: MASK for h in v} if k == "extra_headers" and isinstance(v, dict) else mask_tree(v, secrets))
                for k, v in tree.items()}
    if isinstance(tree, list):
        return [mask_tree(v, secrets) for v in tree]
    if isinstance(tree, str):
        for secret in secrets:
            tree = tree.replace(secret, MASK)
    return tree


def install_log_redaction(settings: Settings, handlers: list[logging.Handler] | None = None) -> None:
    """Redact every configured secret from the messages of every record the root handlers write."""
    redactor = Redactor(configured_secrets(settings))
    for handler in handlers if handlers is not None else logging.getLogger().handlers:
        handler.addFilter(RedactingFilter(redactor))


__all__ = ["MASK", "configured_secrets", "install_log_redaction", "mask_tree"]
