"""Creating and deleting an Attempt's Kubernetes objects exactly once (docs/site-runtime.md,
Kubernetes: Recovery).

- :meth:`NativeObjects.ensure` records the intent in ``jobs.sqlite`` before the create
  is sent; a create whose answer was lost is sent again and its ``409 AlreadyExists``
  resolved by the deterministic name plus identity: the object is adopted when its
  annotations carry this Attempt's identity and material digest, and the create is a
  definite refusal (``native-object-conflict``) when they do not. A tombstoned role
  (deleted before) is never created again.
- :meth:`NativeObjects.delete` deletes by exact ``uid`` with foreground propagation
  and answers only once the object is confirmed absent; then it tombstones the role.
- The Runtime may delete grant Secrets but never read them (least privilege: it
  cannot read a live repository token). A Secret's absence is therefore confirmed
  without GET: the exact-uid DELETE is repeated until it answers ``404 NotFound`` (or
  ``409`` — the name now holds another object); a Secret journalled only as an intent
  (its uid unknown) is deleted on the collection by exact name and this Attempt's
  labels, repeated until the answer lists nothing (ADR 0029).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from site_runtime.adaptors.kubernetes.api import KubeApi, KubeError
from site_runtime.adaptors.kubernetes.journal import AttemptRow, KubernetesJournal, ObjectRow
from site_runtime.application.ports import Deferred
from site_runtime.domain.kubernetes_errors import DEFERRAL, classify, quota_exceeded
from site_runtime.domain.kubernetes_names import Identity

log = logging.getLogger("site_runtime.kubernetes")
#: Kinds the Runtime may delete but not get or list (module doc).
UNREADABLE = frozenset({"Secret"})


class NativeRefused(Exception):
    """The API definitely refused a create; ``code`` is ``native-request-denied``,
    ``native-request-invalid`` or ``native-object-conflict``. Nothing was created."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason


def uncertain(error: KubeError, what: str) -> Deferred:
    """The deferral for an answer that leaves the effect unknown (command kept)."""
    return Deferred(
        DEFERRAL, f"{what}: the Kubernetes API did not answer definitely ({error.status})"
    )


def identity_of(row: AttemptRow, site_id: str) -> Identity:
    """The identity every object of ``row`` carries."""
    return Identity(
        site_id,
        row.run_id,
        row.attempt_id,
        row.attempt_number,
        str(row.material.get("material_digest") or ""),
    )


class NativeObjects:
    """Exactly-once creates and exact deletes over one API and journal (module doc)."""

    def __init__(
        self,
        api: KubeApi,
        journal: KubernetesJournal,
        *,
        confirm_seconds: float = 20.0,
        poll_seconds: float = 0.2,
        fault: Callable[[str], None] | None = None,
    ) -> None:
        """``fault(step)`` is called at each step (``intent:<role>``, ``created:<role>``,
        ``deleted:<role>``): the recovery tests stop the process there (kill -9).
        ``before_delete(row, object)``, when set, runs before a created object's delete
        is sent (the executor keeps a helper Pod's log there); what it raises stops the
        delete, which is tried again later."""
        self._fault = fault or (lambda step: None)
        self.api = api
        self.journal = journal
        self.confirm_seconds = confirm_seconds
        self.poll_seconds = poll_seconds
        self.before_delete: Callable[[AttemptRow, ObjectRow], Awaitable[None]] | None = None

    async def ensure(
        self,
        row: AttemptRow,
        role: str,
        manifest: dict[str, Any],
        identity: Identity,
        *,
        user: str,
        groups: tuple[str, ...],
    ) -> ObjectRow | None:
        """The object of ``role`` exists (created now or before, or adopted); None when the
        role is tombstoned. Raises NativeRefused (definite) or Deferred (uncertain)."""
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        current = self.journal.object(row.attempt_id, role)
        if current is not None and current.state != "intent":
            return current if current.state == "created" else None
        self.journal.intent(row.attempt_id, role, kind, name)
        await self.journal.durable()  # the intent is durable before the create is sent
        self._fault(f"intent:{role}")
        try:
            created = await self.api.create(manifest, user=user, groups=groups)
            self._fault(f"created:{role}")
        except KubeError as error:
            verdict = classify(error.status, error.body, "create")
            if verdict.kind == "definite":
                what = "exceeded quota" if quota_exceeded(error.body) else verdict.reason
                log.info("attempt %s: %s %s refused (%s)", row.attempt_id, kind, name, what)
                raise NativeRefused(verdict.code or "native-request-denied", what) from None
            if verdict.kind != "exists":
                raise uncertain(error, f"create {kind}") from None
            created = await self._adopt(kind, manifest["metadata"]["namespace"], name, identity)
        uid = str((created.get("metadata") or {}).get("uid") or "")
        self.journal.created(row.attempt_id, role, uid)
        return self.journal.object(row.attempt_id, role)

    async def _adopt(
        self, kind: str, namespace: str, name: str, identity: Identity
    ) -> dict[str, Any]:
        if kind in UNREADABLE:
            # Only ever created after this Attempt's own object under the name was
            # confirmed absent (module doc): what holds the name now is someone else's.
            raise NativeRefused(
                "native-object-conflict", f"{kind} {name} belongs to something else"
            )
        try:
            found = await self.api.get(kind, namespace, name)
        except KubeError as error:
            raise uncertain(error, f"get {kind}") from None
        if found is None:  # deleted between the 409 and the read: try the create again later
            raise Deferred(DEFERRAL, f"{kind} {name} vanished during adoption")
        if not identity.owns(found):
            raise NativeRefused(
                "native-object-conflict", f"{kind} {name} belongs to something else"
            )
        log.info("%s %s adopted (created before its answer was lost)", kind, name)
        return found

    async def find(self, row: AttemptRow, role: str, identity: Identity) -> dict[str, Any] | None:
        """The live object of a role journaled only as an intent: found by name and owned
        by ``identity``, or None (then it was never created)."""
        current = self.journal.object(row.attempt_id, role)
        if current is None:
            return None
        try:
            found = await self.api.get(current.kind, row.namespace, current.name)
        except KubeError as error:
            raise uncertain(error, f"get {current.kind}") from None
        if found is not None and identity.owns(found):
            self.journal.created(row.attempt_id, role, str(found["metadata"].get("uid") or ""))
            return found
        return None

    async def delete(self, row: AttemptRow, role: str, identity: Identity) -> None:
        """Delete the role's object by exact uid (foreground), confirm it is gone, then
        tombstone the role; an object never created is tombstoned at once. Raises
        Deferred when the API cannot confirm the deletion now."""
        current = self.journal.object(row.attempt_id, role)
        if current is None or current.state == "deleted":
            return
        await self.journal.durable()  # what led here is durable before the delete is sent
        if current.state == "intent" and current.kind in UNREADABLE:
            await self._delete_unread_intent(row, current, identity, role)
            self.journal.deleted(row.attempt_id, role)
            return
        if current.state == "intent" and await self.find(row, role, identity) is None:
            self.journal.deleted(row.attempt_id, role)
            return
        current = self.journal.object(row.attempt_id, role)
        assert current is not None and current.uid is not None
        if self.before_delete is not None:
            await self.before_delete(row, current)
        kind, name, uid = current.kind, current.name, current.uid
        self.journal.deleting(row.attempt_id, role)
        try:
            await self.api.delete_exact(kind, row.namespace, name, uid)
            self._fault(f"deleted:{role}")
            if kind in UNREADABLE:
                await self._confirm(
                    kind, name, self.api.delete_exact, kind, row.namespace, name, uid
                )
            else:
                await self._confirm(kind, name, self._present, kind, row.namespace, name, uid)
        except KubeError as error:
            raise uncertain(error, f"delete {kind}") from None
        self.journal.deleted(row.attempt_id, role)
        log.info("attempt %s: %s %s deleted", row.attempt_id, kind, name)

    async def _present(self, kind: str, namespace: str, name: str, uid: str) -> bool:
        return not await self.api.gone(kind, namespace, name, uid)

    async def _confirm(self, kind: str, name: str, present: Callable[..., Any], *args: Any) -> None:
        """Wait until ``present(*args)`` is falsy (the object is gone); Deferred after
        ``confirm_seconds``; KubeError passes through."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.confirm_seconds
        while await present(*args):
            if loop.time() >= deadline:
                raise Deferred(DEFERRAL, f"{kind} {name} is not gone yet")
            await asyncio.sleep(self.poll_seconds)

    async def _delete_unread_intent(
        self, row: AttemptRow, current: ObjectRow, identity: Identity, role: str
    ) -> None:
        """An UNREADABLE object journalled only as an intent: delete whatever carries
        this Attempt's labels under its exact name until nothing is listed (module doc)."""
        selector = ",".join(f"{k}={v}" for k, v in identity.labels(_stage(role)).items())
        try:
            await self._confirm(
                current.kind,
                current.name,
                self.api.delete_labelled,
                current.kind,
                row.namespace,
                current.name,
                selector,
            )
        except KubeError as error:
            raise uncertain(error, f"delete {current.kind}") from None


def _stage(role: str) -> str:
    """The stage label of a role's object (a stage Secret carries its helper's)."""
    return role.removesuffix("-secret")
