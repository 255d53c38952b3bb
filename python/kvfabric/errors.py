"""Typed errors of the kvfabric client: every node refusal carries the API's status and code.

The node answers errors as ``{"error": {"code": "snake_case", "message": "..."}}`` (docs/API.md,
"Error codes"); :class:`NodeError` and its subclasses keep ``status``, ``code`` and ``message``.
Failures before an answer (connection refused, a timeout) are :class:`TransportError`; a block
whose bytes do not hash to the id asked for is :class:`VerificationError`.
"""

from __future__ import annotations

import json


class KvFabricError(Exception):
    """Base of every error the package raises."""


class TransportError(KvFabricError):
    """No complete HTTP answer: the connection failed, was reset, or a time limit passed."""


class ClientTimeout(TransportError):
    """A bounded call ran past its time limit."""


class VerificationError(KvFabricError):
    """Bytes read for a block id do not hash to that id (nothing was loaded from them)."""

    def __init__(self, block: str, found: str):
        super().__init__(f"block {block}: the bytes read hash to {found}")
        self.block = block
        self.found = found


class NodeError(KvFabricError):
    """The node refused a request: ``status`` (HTTP), ``code`` and ``message`` (its JSON)."""

    def __init__(self, status: int, code: str, message: str, method: str = "", path: str = ""):
        where = f"{method} {path}: " if method else ""
        super().__init__(f"{where}{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class BadRequest(NodeError):
    """400: the request is malformed (``missing_header``, ``payload_length``, ...)."""


class Unauthorized(NodeError):
    """401: ``missing_token`` or ``invalid_token``."""


class Forbidden(NodeError):
    """403: ``namespace_forbidden``."""


class NotFound(NodeError):
    """404: ``not_found`` (absent, or another tenant's) or ``route_not_found``."""


class Gone(NodeError):
    """410: ``replay_gap`` (the events asked for are no longer buffered)."""


class RequestTimeout(NodeError):
    """408: ``body_timeout``."""


class PayloadTooLarge(NodeError):
    """413: ``body_too_large``."""


class Unavailable(NodeError):
    """503: ``overloaded``, ``not_ready``, ``replication_incomplete``, ...; retried (bounded)."""


class StoreFull(NodeError):
    """507: ``store_full``."""


class ServerError(NodeError):
    """Any other 5xx: the node's own fault (``internal``, ``unknown_geometry``)."""


_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: RequestTimeout,
    410: Gone,
    413: PayloadTooLarge,
    503: Unavailable,
    507: StoreFull,
}


def node_error(status: int, body: bytes | None, method: str = "", path: str = "") -> NodeError:
    """The typed error of a non-2xx answer, from the node's JSON error body."""
    code, message = "unknown", ""
    try:
        err = json.loads(body or b"{}")["error"]
        code, message = str(err["code"]), str(err.get("message", ""))
    except (ValueError, KeyError, TypeError):
        message = (body or b"")[:200].decode("utf-8", "replace")
    cls = _BY_STATUS.get(status, ServerError if status >= 500 else NodeError)
    return cls(status, code, message, method, path)
