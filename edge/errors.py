"""OpenAI-style errors: one exception type the whole gateway raises, one JSON shape it returns.

Kiosk SDKs parse ``{"error": {"message", "type", "param", "code"}}``; every failure, from a bad
field to a cloud outage, leaves the gateway in that shape with the right status, never a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class APIError(Exception):
    status: int
    message: str
    type: str = "invalid_request_error"
    param: str | None = None
    code: str | None = None
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        super().__init__(self.message)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def invalid(message: str, param: str | None = None, code: str | None = "invalid_value") -> APIError:
    return APIError(400, message, "invalid_request_error", param, code)


def model_not_found(name: str) -> APIError:
    return APIError(
        404,
        f"The model `{name}` does not exist or you do not have access to it.",
        "invalid_request_error",
        "model",
        "model_not_found",
    )


def overloaded(message: str, retry_after_s: float = 1.0, code: str = "edge_busy") -> APIError:
    seconds = max(1, round(retry_after_s))
    return APIError(503, message, "server_error", None, code, {"Retry-After": str(seconds)})


def unavailable(message: str, code: str = "backend_unavailable") -> APIError:
    return APIError(503, message, "server_error", None, code)


def internal(message: str = "The gateway failed to handle the request.") -> APIError:
    return APIError(500, message, "server_error", None, "internal_error")
