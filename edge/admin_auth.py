"""The admin bearer token check, shared by the admin routes and the requests that may act as admin."""

from __future__ import annotations

import hmac

from pydantic import SecretStr


def shows_admin_token(authorization: str | None, token: SecretStr | None) -> bool:
    """True when ``authorization`` is ``Bearer <the admin token>`` (constant-time comparison).

    False whenever no token is configured: an empty token admits nobody.
    """
    expected = token.get_secret_value() if token is not None else ""
    if not expected or not authorization:
        return False
    scheme, _, given = authorization.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), expected.encode())


__all__ = ["shows_admin_token"]
