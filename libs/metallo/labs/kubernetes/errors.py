"""Kubernetes ``Status`` failures the lab API answers with (meta/v1 Status).

Shape and reasons follow the Kubernetes API reference, "Status"
(https://kubernetes.io/docs/reference/kubernetes-api/common-definitions/status/)
and ``k8s.io/apimachinery/pkg/api/errors``: every refusal carries ``kind: Status``,
``status: Failure``, a ``reason`` from Kubernetes' own list and ``code`` equal to
the HTTP status.
"""

from __future__ import annotations

from typing import Any


class ApiError(Exception):
    """A refusal rendered as a ``Status`` body with HTTP status ``code``."""

    def __init__(self, code: int, reason: str, message: str,
                 details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    def status(self) -> dict[str, Any]:
        """The ``Status`` body (meta/v1)."""
        body: dict[str, Any] = {
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def qualified(plural: str, group: str) -> str:
    """``jobs.batch`` for a group resource, ``pods`` for the core group."""
    return f"{plural}.{group}" if group else plural


def _details(name: str | None, group: str, plural: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": plural}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    out.update(extra)
    return out


def not_found(plural: str, group: str, name: str) -> ApiError:
    """404 NotFound: ``pods "x" not found``."""
    return ApiError(404, "NotFound", f'{qualified(plural, group)} "{name}" not found',
                    _details(name, group, plural))


def already_exists(plural: str, group: str, name: str) -> ApiError:
    """409 AlreadyExists: ``jobs.batch "x" already exists``."""
    return ApiError(409, "AlreadyExists", f'{qualified(plural, group)} "{name}" already exists',
                    _details(name, group, plural))


def conflict(plural: str, group: str, name: str, why: str) -> ApiError:
    """409 Conflict: ``Operation cannot be fulfilled on jobs.batch "x": <why>``."""
    return ApiError(409, "Conflict",
                    f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
                    _details(name, group, plural))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def forbidden(plural: str, group: str, name: str | None, why: str) -> ApiError:
    """403 Forbidden: ``pods "x" is forbidden: <why>`` (or ``pods is forbidden: ...``)."""
    subject = f'{qualified(plural, group)} "{name}"' if name else qualified(plural, group)
    return ApiError(403, "Forbidden", f"{subject} is forbidden: {why}",
                    _details(name, group, plural))


def invalid(kind: str, group: str, name: str, causes: list[tuple[str, str, str]]) -> ApiError:
    """422 Invalid; ``causes`` are (field, reason, message), e.g.
    ("metadata.name", "FieldValueInvalid", "Invalid value: ..."). Kubernetes names the
    Kind here, not the plural: ``Job.batch "x" is invalid: spec.template: ...``."""
    text = "; ".join(f"{f}: {m}" for f, _, m in causes)
    subject = f"{kind}.{group}" if group else kind
    details: dict[str, Any] = {"name": name, "kind": kind,
                               "causes": [{"reason": r, "message": m, "field": f} for f, r, m in causes]}
    if group:
        details["group"] = group
    return ApiError(422, "Invalid", f'{subject} "{name}" is invalid: {text}', details)


def bad_request(message: str) -> ApiError:
    """400 BadRequest."""
    return ApiError(400, "BadRequest", message)


def unauthorized() -> ApiError:
    """401 Unauthorized (no or unknown bearer token)."""
    return ApiError(401, "Unauthorized", "Unauthorized")


def gone(message: str) -> ApiError:
    """410 Expired: a watch or list from a resourceVersion older than the lab keeps."""
    return ApiError(410, "Expired", message)


def method_not_allowed(message: str = "the server does not allow this method on the requested resource") -> ApiError:
    """405 MethodNotAllowed."""
    return ApiError(405, "MethodNotAllowed", message)


def unsupported_media(content_type: str) -> ApiError:
    """415 UnsupportedMediaType."""
    return ApiError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types include: "
                    f"application/json-patch+json, application/merge-patch+json, "
                    f"application/apply-patch+yaml, application/strategic-merge-patch+json "
                    f"(got {content_type!r})")
