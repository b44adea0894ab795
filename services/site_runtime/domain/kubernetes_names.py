"""Deterministic names and identity of an Attempt's Kubernetes objects (seed 004 §5B).

Every native object of an Attempt has a name computed from the Attempt alone, so a
lost answer or a restart finds the object it may already have created instead of
creating a second one, and identity labels/annotations that decide whether an
object found under that name really is this Attempt's (adoption) or someone
else's (a definite refusal).

Names are DNS-1123 labels (lower-case alphanumerics and ``-``, at most
:data:`MAX_NAME` characters): a readable prefix of the Attempt id and a hash of the
whole id, so two Attempts never share a name even when their ids only differ past
the prefix. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

#: Objects per Attempt, by role; the value is the name suffix.
OBJECTS = {
    "workspace": "ws",  # PersistentVolumeClaim: the private workspace
    "stage-in": "in",  # helper Pod (and its grant Secret) that checks out the commit
    "compute": "run",  # the Job
    "stage-out": "out",  # helper Pod (and its grant Secret) that commits and pushes
}
#: Kubernetes adds up to 11 characters to a Job's name for its Pods; names stay well
#: below the 63 of a DNS-1123 label so generated names and label values fit too.
MAX_NAME = 48
PREFIX = "mt"
MANAGED_BY = "metallo"

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_SITE = "metallo.dev/site"
LABEL_RUN = "metallo.dev/run"
LABEL_ATTEMPT = "metallo.dev/attempt"
LABEL_STAGE = "metallo.dev/stage"
ANNOTATION_DIGEST = "metallo.dev/material-digest"
ANNOTATION_ATTEMPT_NUMBER = "metallo.dev/attempt-number"
ANNOTATION_RUN = "metallo.dev/run-id"
ANNOTATION_ATTEMPT = "metallo.dev/attempt-id"

_LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")
_DNS_LABEL = re.compile(r"^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$")


def is_dns_label(name: str) -> bool:
    """True when ``name`` is a DNS-1123 label (what Kubernetes requires of names)."""
    return bool(_DNS_LABEL.match(name))


def label_value(raw: str) -> str:
    """``raw`` as a valid label value (≤ 63 characters of ``[A-Za-z0-9._-]``, alphanumeric
    at both ends): kept as is when valid, else a readable prefix plus a hash suffix."""
    if _LABEL_VALUE.match(raw):
        return raw
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", raw).strip("._-")[:50].rstrip("._-")
    suffix = hashlib.sha256(raw.encode()).hexdigest()[:12]
    return f"{cleaned}-{suffix}" if cleaned else f"h-{suffix}"


def attempt_base(attempt_id: str) -> str:
    """The name stem of every object of ``attempt_id``: ``mt-<prefix>-<hash10>``, a
    DNS-1123 label short enough for :data:`OBJECTS` suffixes within :data:`MAX_NAME`."""
    digest = hashlib.sha256(attempt_id.encode()).hexdigest()[:10]
    readable = re.sub(r"[^a-z0-9]+", "-", attempt_id.lower()).strip("-")
    room = MAX_NAME - len(PREFIX) - len(digest) - 3 - 1 - max(map(len, OBJECTS.values()))
    readable = readable[:room].strip("-")
    return f"{PREFIX}-{readable}-{digest}" if readable else f"{PREFIX}-{digest}"


def object_name(attempt_id: str, role: str) -> str:
    """Name of the Attempt's object for ``role`` (a key of :data:`OBJECTS`); the stage
    Secrets share their helper Pod's name. Raises KeyError for an unknown role."""
    return f"{attempt_base(attempt_id)}-{OBJECTS[role]}"


@dataclass(frozen=True)
class Identity:
    """Who an object belongs to: the Attempt, its Run and the saved material digest."""

    site_id: str
    run_id: str
    attempt_id: str
    attempt_number: int
    material_digest: str

    def labels(self, stage: str) -> dict[str, str]:
        """Labels every object of the Attempt carries (``stage`` is a key of
        :data:`OBJECTS`); the Site label is what one observe cycle's list selects by."""
        return {
            LABEL_MANAGED_BY: MANAGED_BY,
            LABEL_SITE: label_value(self.site_id),
            LABEL_RUN: label_value(self.run_id),
            LABEL_ATTEMPT: label_value(self.attempt_id),
            LABEL_STAGE: stage,
        }

    def annotations(self) -> dict[str, str]:
        """Annotations with the exact (unshortened) identity and the material digest."""
        return {
            ANNOTATION_RUN: self.run_id,
            ANNOTATION_ATTEMPT: self.attempt_id,
            ANNOTATION_ATTEMPT_NUMBER: str(self.attempt_number),
            ANNOTATION_DIGEST: self.material_digest,
        }

    def owns(self, obj: dict[str, Any]) -> bool:
        """True when ``obj`` (a Kubernetes object as JSON) carries exactly this identity:
        the Attempt, Run and material digest annotations all agree. An object under the
        Attempt's name without them was not created for this Attempt."""
        notes = (obj.get("metadata") or {}).get("annotations") or {}
        return (
            notes.get(ANNOTATION_ATTEMPT) == self.attempt_id
            and notes.get(ANNOTATION_RUN) == self.run_id
            and notes.get(ANNOTATION_DIGEST) == self.material_digest
        )


def site_selector(site_id: str) -> str:
    """The label selector of every object this Runtime manages for ``site_id``."""
    return f"{LABEL_MANAGED_BY}={MANAGED_BY},{LABEL_SITE}={label_value(site_id)}"
