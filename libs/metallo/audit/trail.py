"""What a service audits of its bus commands, and the records it writes for them.

A :class:`~metallo.messaging.CommandServer` given an :class:`AuditTrail` appends
one record per decision of an audited command in the deciding transaction: an
accepted one with the handler's writes, its receipt and its reply; a refused one
with the saved rejection and its reply. A replay (the same command_id) decides
nothing and records nothing; a transient refusal (retry later) is no decision and
is not recorded; a transaction that rolls back takes its record with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from google.protobuf.message import Message

from metallo.audit.records import ACCEPTED, DRY_RUN, MAX_AFFECTED, AuditEntry
from metallo.audit.redaction import redact, request_summary, secret_field

#: Field names (besides ``*_id``) that name what a decision concerns.
ID_FIELDS = frozenset({"rerun_of", "attempt_number"})


def affected_ids(*messages: Message | None) -> dict[str, str]:
    """Ids named by the messages' top-level fields and one nested message level:
    ``*_id`` fields (never ``command_id``) and :data:`ID_FIELDS`; the first message
    naming an id wins. Secret-named fields are never taken."""
    found: dict[str, str] = {}

    def take(message: Message, depth: int) -> None:
        for descriptor, value in message.ListFields():
            name = descriptor.name
            if descriptor.message_type is not None:
                if depth == 0 and not descriptor.is_repeated and name != "metadata":
                    take(value, 1)
                continue
            if descriptor.is_repeated or secret_field(name):
                continue
            if (name.endswith("_id") and name != "command_id") or name in ID_FIELDS:
                if value not in ("", 0) and name not in found and len(found) < MAX_AFFECTED:
                    found[name] = str(value)

    for message in messages:
        if message is not None:
            take(message, 0)
    return found


def is_dry_run(command: Message) -> bool:
    """Whether ``command`` has a ``dry_run`` field and it is set."""
    return "dry_run" in command.DESCRIPTOR.fields_by_name and bool(command.dry_run)


#: A dry run's conclusion from its reply: ``(code, conclusion)`` — ``code`` is
#: :data:`DRY_RUN_ALLOWED` or the refusal code the real command would get, and
#: ``conclusion`` says what it would do (kept in the summary as ``conclusion``).
DryRunConclusion = Callable[[Message], tuple[str, dict[str, object]]]
#: The ``code`` of a dry run that concluded the real command would be accepted.
DRY_RUN_ALLOWED = "allowed"


class AuditTrail:
    """The audited commands of one ``service`` and their action names
    (``{LaunchRun: "run.launch"}``); builds their :class:`AuditEntry`. ``conclusions``
    reads what a dry run of a command concluded from its reply (:data:`DryRunConclusion`)."""

    def __init__(self, service: str, actions: Mapping[type[Message], str],
                 conclusions: Mapping[type[Message], DryRunConclusion] | None = None):
        self.service = service
        self.actions = {t.DESCRIPTOR.full_name: a for t, a in actions.items()}
        self.conclusions = {t.DESCRIPTOR.full_name: c for t, c in (conclusions or {}).items()}

    def audits(self, command: Message) -> bool:
        """Whether ``command``'s decisions are recorded."""
        return command.DESCRIPTOR.full_name in self.actions

    def entry(self, command: Message, *, principal: str | None, correlation_id: str | None,
              decision: str, code: str = "", reply: Message | None = None) -> AuditEntry:
        """The record of ``decision`` (``accepted`` with its ``reply``, or ``refused`` with
        its ``code``) on ``command``, sent by ``principal``. An accepted command whose
        ``dry_run`` field is set decided nothing: its decision is ``dry-run``, and with a
        conclusion for the command its ``code`` and ``summary["conclusion"]`` say what
        the dry run concluded (allowed or the refusal code, and what it would do)."""
        meta = command.metadata
        summary = request_summary(command)
        if decision == ACCEPTED and is_dry_run(command):
            decision = DRY_RUN
            conclude = self.conclusions.get(command.DESCRIPTOR.full_name)
            if conclude is not None and reply is not None:
                code, conclusion = conclude(reply)
                summary = {**summary, "conclusion": redact(conclusion)}
        return AuditEntry(
            actor=meta.acting_member, principal=principal or "", project=meta.project,
            action=self.actions[command.DESCRIPTOR.full_name], decision=decision, code=code,
            request_id=meta.command_id, correlation_id=correlation_id or "",
            affected=affected_ids(command, reply), summary=summary)
