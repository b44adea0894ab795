"""Collections: one Pipeline step that runs its action once per item (ADR 0031; seed 002 §15.2).

An action with ``matrix`` or ``parameters`` becomes a collection step. When the
step starts it is pinned once (one revision, one commit) and every child is
created at once — all identities or none — each a record of parameter values
(:func:`metallo.parameters.expand`). Each child is a Run of its own in Execution
Core (its own outcome, logs, retries and ``metallo run rerun``); the values
reach its command only as ``METALLO_PARAM_<NAME>``.

Child states: ``waiting`` → ``launching`` → ``launched`` → ``succeeded`` |
``failed`` | ``cancelled`` | ``uncertain`` (a lost Run: its work may or may not
have run); ``cancelling`` once its Run was asked to stop. A waiting child is
``cancelled`` without a Run when the collection halts: the Pipeline stops, a
member cancels the collection, or ``failFast`` saw a child fail. Halting never
rewrites a child that already ended, and a child whose Run ended while it was
being cancelled keeps the Run's outcome.

The step ends once every child has ended: ``succeeded`` when all did,
``failed`` when one failed or is uncertain, else ``cancelled``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from metallo import parameters

# Child states
WAITING = "waiting"
LAUNCHING = "launching"
LAUNCHED = "launched"
CANCELLING = "cancelling"
SUCCEEDED = "succeeded"
FAILED = "failed"
CANCELLED = "cancelled"
UNCERTAIN = "uncertain"
ITEM_ENDED = frozenset({SUCCEEDED, FAILED, CANCELLED, UNCERTAIN})
ITEM_ACTIVE = frozenset({LAUNCHING, LAUNCHED, CANCELLING})
ITEM_OF_OUTCOME = {"succeeded": SUCCEEDED, "failed": FAILED, "cancelled": CANCELLED, "lost": UNCERTAIN,
                   "timed-out": FAILED}

DEFAULT_MAX_ACTIVE = 10
MAX_ACTIVE_LIMIT = 1000
ARRAY_NEVER, ARRAY_PREFER, ARRAY_REQUIRE = "never", "prefer", "require"
ARRAY = frozenset({ARRAY_NEVER, ARRAY_PREFER, ARRAY_REQUIRE})

# Reason codes (docs/pipelines.md, Collections)
R_COLLECTION_INVALID = "collection-invalid"
R_COLLECTION_FAILED = "collection-failed"
R_COLLECTION_CANCELLED = "collection-cancelled"
R_FAIL_FAST = "fail-fast"
R_ARRAY_UNAVAILABLE = "array-unavailable"
R_STOPPED = "stopped-by-member"
MAX_REASON = 500


@dataclass(frozen=True)
class Shape:
    """A collection as actions.yaml wrote it: ``matrix`` (name, values) in file order or ``records``."""

    matrix: tuple[tuple[str, tuple[str, ...]], ...] = ()
    records: tuple[dict[str, str], ...] = ()
    max_active: int = DEFAULT_MAX_ACTIVE
    fail_fast: bool = False
    array: str = ARRAY_PREFER

    def to_json(self) -> dict[str, Any]:
        """The JSON kept with the step (immutable, like the graph)."""
        return {"matrix": [[n, list(v)] for n, v in self.matrix], "records": [dict(r) for r in self.records],
                "max_active": self.max_active, "fail_fast": self.fail_fast, "array": self.array}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Shape:
        """The value :meth:`to_json` wrote."""
        return cls(
            matrix=tuple((str(n), tuple(v)) for n, v in raw.get("matrix") or ()),
            records=tuple(dict(r) for r in raw.get("records") or ()),
            max_active=int(raw.get("max_active") or DEFAULT_MAX_ACTIVE),
            fail_fast=bool(raw.get("fail_fast")),
            array=str(raw.get("array") or ARRAY_PREFER),
        )


def shape(matrix, records, max_active: int = 0, fail_fast: bool = False, array: str = "") -> Shape:
    """A :class:`Shape` from an owner's answer, as given (:func:`items_of` checks it when the step starts)."""
    return Shape(
        matrix=tuple((str(n), tuple(str(v) for v in values)) for n, values in matrix),
        records=tuple({str(k): str(v) for k, v in r.items()} for r in records),
        max_active=max_active or DEFAULT_MAX_ACTIVE,
        fail_fast=fail_fast,
        array=array or ARRAY_PREFER,
    )


@dataclass(frozen=True)
class Item:
    """One child: its parameter values and, once launched, its Run."""

    index: int
    parameters: dict[str, str] = field(default_factory=dict)
    state: str = WAITING
    run_id: str = ""
    launch_command_id: str = ""
    run_outcome: str = ""
    reason_code: str = ""
    message: str = ""
    output_commit: str = ""
    cancel_requested: bool = False
    cancel_refused: bool = False
    started_at: datetime | None = None
    ended_at: datetime | None = None
    observed_at: datetime | None = None
    carried_from: str = ""  # a rerun --failed child that kept the result of this Pipeline's Run

    @property
    def ended(self) -> bool:
        """The child will not change any more."""
        return self.state in ITEM_ENDED

    @property
    def awaiting_end(self) -> bool:
        """A Run was (or may have been) launched and its end is not known yet."""
        launched = bool(self.run_id) or self.state == LAUNCHING
        return launched and not self.run_outcome and not self.cancel_refused


def items_of(s: Shape) -> tuple[Item, ...]:
    """Every child of a collection, numbered from 1 in expansion order.

    Raises ParameterError for a shape that breaks a rule (metallo.parameters,
    ``max_active`` 1..1000, ``array`` never | prefer | require).
    """
    if not 1 <= s.max_active <= MAX_ACTIVE_LIMIT:
        raise parameters.ParameterError([f"maxActive must be 1..{MAX_ACTIVE_LIMIT}"])
    if s.array not in ARRAY:
        raise parameters.ParameterError([f"array {s.array[:20]!r} is not one of never, prefer, require"])
    return tuple(Item(index=i, parameters=v) for i, v in enumerate(parameters.expand(s.matrix, s.records), start=1))


def array_decision(s: Shape, environment: str) -> tuple[str, str]:
    """(decision, refusal code): how the children are submitted, and why not as an array.

    On a Slurm environment ``prefer`` and ``require`` launch every child at once in
    one array group (Execution Core starts them as one Slurm array per stage, the
    array's ``%maxActive`` throttling them); elsewhere ``prefer`` runs them as
    individual Runs and ``require`` is refused (``array-unavailable``) rather than
    silently submitted one by one. How Execution Core then started them comes back
    with each child's Run (:func:`with_array_start`).
    """
    if s.array == ARRAY_NEVER:
        return "individual: array: never", ""
    if environment == "slurm":
        return f"array: {s.array}: one Slurm array per stage (maxActive {s.max_active})", ""
    why = f"the Site's environment is {environment}, not slurm"
    if s.array == ARRAY_REQUIRE:
        return f"refused: array: require, but {why}", R_ARRAY_UNAVAILABLE
    return f"individual: {why}", ""


def launches_as_array(s: Shape | None, environment: str) -> bool:
    """Whether the children are launched together in one array group."""
    return s is not None and s.array != ARRAY_NEVER and environment == "slurm"


def array_position(items: tuple[Item, ...], item: Item) -> tuple[int, int]:
    """(task index from 0, group size) of ``item`` among the children launched in the
    array group: every child but those a rerun carried over (they never launch again),
    in item order — so a rerun's group holds exactly the children it relaunches."""
    launched = [i.index for i in items if not i.carried_from]
    return launched.index(item.index), len(launched)


_ARRAY_NAMESPACE = uuid.UUID("5d0c9e3a-7b61-4f0e-9a2c-3e8f1b6d4a70")


def array_group_id(collection_id: str, launch_attempt: int) -> str:
    """The array group of a collection's children launched together (stable: a
    re-sent launch names the same group)."""
    return str(uuid.uuid5(_ARRAY_NAMESPACE, f"{collection_id}:{launch_attempt}"))


def with_array_start(decision: str, array_start: str) -> str:
    """The step's array decision once a child's Run says how it was started: an array
    that fell back (``individual: …``) or failed (``refused: …``) says why, once."""
    if not decision.startswith("array:") or not array_start.startswith(("individual:", "refused:")):
        return decision
    if "; then " in decision:
        return decision  # the first child's word stands: the group settles once
    return f"{decision}; then {array_start}"[:MAX_REASON]


def halting_reason(items: tuple[Item, ...], fail_fast: bool, stopping: bool, cancelled_by: str) -> tuple[str, str]:
    """(code, why) the collection halts — its waiting children are no longer launched and
    its launched ones are cancelled — or ("", "") when it does not."""
    if stopping:
        return R_STOPPED, "the Pipeline was stopped"
    if cancelled_by:
        return R_COLLECTION_CANCELLED, f"the collection was cancelled by {cancelled_by}"
    if fail_fast:
        failed = next((i for i in items if i.state in (FAILED, UNCERTAIN)), None)
        if failed is not None:
            return R_FAIL_FAST, f"child {failed.index} {failed.state} (failFast)"
    return "", ""


def settle_items(items: tuple[Item, ...], halt: str, halt_message: str, now: datetime) -> tuple[Item, ...]:
    """Apply Run ends to their children and, when halting, cancel every waiting child (no Run)."""
    out = []
    for i in items:
        if i.run_outcome and i.state in (LAUNCHING, LAUNCHED, CANCELLING):
            i = replace(i, state=ITEM_OF_OUTCOME.get(i.run_outcome, FAILED), ended_at=i.ended_at or now)
        elif halt and i.state == WAITING:
            i = replace(i, state=CANCELLED, reason_code=halt, message=f"never launched: {halt_message}"[:MAX_REASON],
                        ended_at=now)
        out.append(i)
    return tuple(out)


def counts(items: tuple[Item, ...]) -> dict[str, int]:
    """CollectionCounts: every child counted once (launching and cancelling are active).

    ``carried`` counts the succeeded children a rerun carried over (within ``succeeded``).
    """
    out = dict.fromkeys(("waiting", "active", "succeeded", "failed", "cancelled", "uncertain", "carried"), 0)
    for i in items:
        out["carried"] += 1 if i.carried_from else 0
        if i.state == WAITING:
            out["waiting"] += 1
        elif i.state in ITEM_ACTIVE:
            out["active"] += 1
        else:
            out[i.state] += 1
    out["total"] = len(items)
    return out


def outcome(items: tuple[Item, ...], array_decision: str = "") -> tuple[str, str, str]:
    """(step state, reason code, message) once every child ended; ``array_decision`` is
    the step's (:func:`with_array_start`), whose fallback or refusal names why a
    collection whose every failure is ``array-unavailable`` failed."""
    c = counts(items)
    summary = f"{c['succeeded']} of {c['total']} children succeeded"
    if c["carried"]:
        summary += f" ({c['carried']} carried over)"
    if c["failed"] or c["uncertain"]:
        detail = ", ".join(f"{c[k]} {k}" for k in ("failed", "uncertain", "cancelled") if c[k])
        failed = [i for i in items if i.state in (FAILED, UNCERTAIN)]
        if all(i.state == FAILED and i.reason_code == R_ARRAY_UNAVAILABLE for i in failed):
            # Every failure is the array's (array: require): that is the step's reason.
            why = array_decision.split("; then ", 1)[1] if "; then " in array_decision else "no array could be made"
            return FAILED, R_ARRAY_UNAVAILABLE, f"{summary} ({detail}): {why}"[:MAX_REASON]
        return FAILED, R_COLLECTION_FAILED, f"{summary} ({detail})"
    if c["cancelled"]:
        return CANCELLED, R_COLLECTION_CANCELLED, f"{summary} ({c['cancelled']} cancelled)"
    return SUCCEEDED, "", summary
