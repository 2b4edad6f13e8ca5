"""Refuse requests a web page could send: foreign ``Host`` names, foreign ``Origin``s, non-JSON bodies.

A kiosk is a browser on an unattended device, and every page that browser shows can reach the
gateway on its loopback port. Three checks, as one ASGI middleware in front of every route (so a
route added later is covered without touching it):

- **Host allow-list.** A DNS-rebinding page reaches 127.0.0.1 under its own name, so its requests
  carry ``Host: evil.example``. Only loopback names (``127.0.0.1``, ``localhost``, ``[::1]``), the
  address the gateway binds to and the operator's ``[server] allowed_hosts`` are answered; ``"*"``
  in that list turns the check off (behind a proxy that checks names itself). A request without a
  ``Host`` header (HTTP/1.0 probes) is not a browser's and passes.
- **Origin allow-list.** Browsers name the page that makes a request in ``Origin``. A request that
  carries one is answered only if it is listed in ``[server] cors_origins`` (the kiosk web app) or
  is the gateway's own origin (its dashboard). The SDKs and curl send no ``Origin`` and are not
  affected. ``Origin: null`` (sandboxed frames, ``file://``) is foreign unless listed.
- **JSON bodies only.** ``text/plain``, ``application/x-www-form-urlencoded`` and
  ``multipart/form-data`` are what a page may POST cross-origin without a CORS preflight; a body
  of any type but ``application/json`` (and CSV where a route takes it) gets 415.

Refusals are OpenAI-style error JSON and happen before the in-flight limit counts the request.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_WILDCARD_BINDS = {"0.0.0.0", "::", "[::]", ""}  # noqa: S104 - names to recognise, not to bind
_BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
JSON_TYPES = frozenset({"application/json"})
# Routes that also take another body type (the FAQ pack upload takes CSV).
EXTRA_BODY_TYPES: dict[str, frozenset[str]] = {
    "/admin/cache/faq": frozenset({"text/csv", "application/csv"}),
    # A Markdown knowledge pack; not a CORS-safelisted type, so a page cannot send it without a preflight.
    "/admin/knowledge": frozenset({"text/markdown", "text/x-markdown"}),
}


def host_name(header: str) -> str:
    """The name part of a ``Host`` header, lower-cased, without port or trailing dot."""
    value = header.strip().lower()
    if value.startswith("["):  # [::1]:8080
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    name = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    return name.rstrip(".")


def _normal_host(name: str) -> str:
    name = name.strip().lower().rstrip(".")
    if ":" in name and not name.startswith("["):  # a bare IPv6 address
        name = f"[{name}]"
    return name


def _normal_origin(origin: str) -> str:
    return origin.strip().rstrip("/").lower()


@dataclass(frozen=True)
class GuardPolicy:
    """What the guard admits; built from ``[server]`` by :func:`policy_for`."""

    hosts: frozenset[str] = frozenset(LOOPBACK_NAMES)
    any_host: bool = False
    origins: frozenset[str] = frozenset()
    extra_body_types: dict[str, frozenset[str]] = field(default_factory=lambda: dict(EXTRA_BODY_TYPES))

    def host_allowed(self, header: str | None) -> bool:
        if header is None or self.any_host:
            return True
        return host_name(header) in self.hosts

    def origin_allowed(self, origin: str | None, scheme: str, host: str | None) -> bool:
        if origin is None:
            return True
        given = _normal_origin(origin)
        if given in self.origins:
            return True
        # The gateway's own pages (the dashboard): same origin as the Host just admitted.
        return host is not None and given == f"{scheme}://{host.strip().lower()}"

    def body_type_allowed(self, path: str, content_type: str | None, has_body: bool) -> bool:
        if content_type is None:
            return not has_body
        media = content_type.split(";", 1)[0].strip().lower()
        return media in JSON_TYPES or media in self.extra_body_types.get(path, frozenset())


def policy_for(bind_host: str, allowed_hosts: Iterable[str], allowed_origins: Iterable[str]) -> GuardPolicy:
    """Loopback names, the bound address (unless a wildcard) and the operator's names and origins."""
    names = [_normal_host(h) for h in allowed_hosts]
    hosts = set(LOOPBACK_NAMES) | {n for n in names if n and n != "*"}
    if bind_host.strip() not in _WILDCARD_BINDS:
        hosts.add(_normal_host(bind_host))
    return GuardPolicy(
        hosts=frozenset(hosts),
        any_host="*" in names,
        origins=frozenset(_normal_origin(o) for o in allowed_origins if o),
    )


def _error(status: int, message: str, code: str) -> tuple[int, bytes]:
    kind = "invalid_request_error" if status == 415 else "permission_error"
    return status, json.dumps({"error": {"message": message, "type": kind, "param": None, "code": code}}).encode()


class HttpGuard:
    """ASGI middleware applying a :class:`GuardPolicy` to every HTTP request."""

    def __init__(self, app: Any, policy: GuardPolicy) -> None:
        self.app = app
        self.policy = policy

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = self.check(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, body = refused
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
            (b"vary", b"Origin")]})
        await send({"type": "http.response.body", "body": body})

    def check(self, scope: dict[str, Any]) -> tuple[int, bytes] | None:
        """None if the request may go on, else the status and body of the refusal."""
        headers: dict[str, str] = {}
        for raw_name, raw_value in scope.get("headers", ()):
            name = raw_name.decode("latin-1").lower()
            if name in ("host", "origin", "content-type", "content-length", "transfer-encoding"):
                if name in headers and name in ("host", "origin"):
                    return _error(400, f"The request carries more than one {name} header.", f"duplicate_{name}")
                headers[name] = raw_value.decode("latin-1")
        policy = self.policy
        host = headers.get("host")
        if not policy.host_allowed(host):
            return _error(403, "Host name not allowed: add it to [server] allowed_hosts if this gateway "
                               "should answer to it.", "host_not_allowed")
        if not policy.origin_allowed(headers.get("origin"), scope.get("scheme", "http"), host):
            return _error(403, "Requests from this web origin are not allowed: list the kiosk app's origin "
                               "in [server] cors_origins.", "origin_not_allowed")
        if scope.get("method", "GET") in _BODY_METHODS:
            length = headers.get("content-length", "").strip()
            has_body = "transfer-encoding" in headers or (bool(length) and length != "0")
            if not policy.body_type_allowed(scope.get("path", ""), headers.get("content-type"), has_body):
                return _error(415, "Unsupported Content-Type: send the body as application/json "
                                   "(curl: -H 'Content-Type: application/json').", "unsupported_media_type")
        return None


__all__ = ["LOOPBACK_NAMES", "GuardPolicy", "HttpGuard", "host_name", "policy_for"]
