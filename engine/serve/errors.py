"""APIError: every refusal the server gives, in OpenAI's shape, so an `openai` client raises its own
error classes (BadRequestError, AuthenticationError, NotFoundError, RateLimitError) with our message.

    HTTP 400  {"error": {"message": "max_tokens must be an integer, got 1.5", "type": "invalid_request_error",
                         "param": "max_tokens", "code": null}}

A client never sees a traceback: anything unexpected is answered 500 with one sentence, and the
traceback goes to the server's log (handlers.py).
"""
from __future__ import annotations

import json

ERROR_TYPES = {   # status -> OpenAI's error "type"
    400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
    405: "invalid_request_error", 413: "invalid_request_error", 429: "rate_limit_error",
    500: "server_error", 503: "service_unavailable",
}


class APIError(Exception):
    """A refusal with its HTTP status, the request field it concerns (`param`), and OpenAI's `code`."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": ERROR_TYPES.get(self.status, "invalid_request_error"),
                          "param": self.param, "code": self.code}}

    def json(self) -> str:
        return json.dumps(self.body())


def bad_request(message: str, param: str | None = None) -> APIError:
    return APIError(400, message, param)
