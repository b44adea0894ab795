"""Array groups in Execution Core's workflows (ADR 0032; rules in :mod:`~execution_core.domain.arrays`).

- LaunchRun saves the group (its one deadline counts from the first child's
  acceptance) and the child's index before the Run exists for anyone else;
- planning places the group on the first child's Site and every later child
  there; a Site that is not Slurm settles the group (``prefer``: individual,
  ``require``: failed, and the child is refused ``array-unavailable``);
- the Attempt of each child is mapped to its index in the planning transaction,
  so the mapping is saved before any ``start-array`` command can be sent;
- a member's succeeded prepare bumps the group's ``prepared`` counter; the
  supervisor's step of a forming group's child locks the group row first (before
  any Run row), settles it — dispatch, fall back, or wait — and, when the step
  ends that child, counts it ``dropped``;
- dispatch saves the one ``start-array`` command (a deterministic id, a unique
  key per Attempt and kind) and the group's ``dispatched`` state in the same
  transaction: a restart never sends a second one, nor loses a child;
- the Site's answer to it records each child's own ``start`` (its task's native
  jobs) or the refusal's fallback, and wakes every child.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from execution_core.application.array_ports import ArrayStore
from execution_core.application.ports import MessageOutbox, RunStore
from execution_core.application.settings import Settings
from execution_core.domain import arrays as a
from execution_core.domain import reasons
from execution_core.domain.canonical import canonical_json
from execution_core.domain.lifecycle_facts import Decision
from execution_core.domain.planning import Plan, Rejection, Wait
from execution_core.domain.states import QUEUED_BATCH
from metallo.common.v1 import common_pb2
from metallo.messaging import Rejected
from metallo.site_coordination.v1 import site_coordination_pb2 as sc

SLURM = "slurm"


def command_id_of(attempt_id: str, kind: str, ordinal: int) -> str:
    """The supervisor's stable command id (imported late: the supervisor uses this module)."""
    from execution_core.application.supervisor import site_command_id

    return site_command_id(attempt_id, kind, ordinal)


class ArrayGroups:
    """The array-group steps of acceptance, planning, supervision and results."""

    def __init__(self, store: RunStore, arrays: ArrayStore, outbox: MessageOutbox, settings: Settings):
        self.store = store
        self.arrays = arrays
        self.outbox = outbox
        self.settings = settings

    # ------------------------------------------------------------------ acceptance
    async def register(self, session: AsyncSession, g: a.GroupRequest, run_id: str, project: str) -> None:
        """Save the child's group (created by its first child) and index; raise Rejected
        ``invalid-argument`` for a group named with other values, another Project's, or
        an index another Run holds."""
        why = a.check_request(g)
        if why:
            raise Rejected(reasons.INVALID_ARGUMENT, why)
        now = await self.store.now(session)
        saved = await self.arrays.ensure_group(session, {
            "group_id": g.group_id, "project": project, "size": g.size, "max_active": g.max_active,
            "mode": g.mode,
            "deadline": now + timedelta(seconds=self.settings.array_group_deadline_seconds),
        })
        if saved["project"] != project or not a.same_group(saved, g):
            raise Rejected(reasons.INVALID_ARGUMENT,
                           f"array group {g.group_id} was started with another size, max_active or mode")
        if await self.arrays.member_at(session, g.group_id, g.index) is not None:
            raise Rejected(reasons.INVALID_ARGUMENT,
                           f"array group {g.group_id} index {g.index} belongs to another Run")
        await self.arrays.insert_member(session, g.group_id, g.index, run_id)

    # ------------------------------------------------------------------ planning
    async def planning_group(self, session: AsyncSession, run: dict[str, Any]) -> dict[str, Any] | None:
        """The Run's group, locked (taken before the Run's row is written); None for none."""
        if not run.get("array_group_id"):
            return None
        return await self.arrays.find_group(session, run["array_group_id"], for_update=True)

    @staticmethod
    def planning_site(group: dict[str, Any] | None) -> str:
        """The Site a child must be planned on ("" = any)."""
        if group is None or group["state"] in (a.INDIVIDUAL, a.FAILED):
            return ""
        return group["site_id"]

    @staticmethod
    def refusal(group: dict[str, Any] | None) -> Rejection | None:
        """A child of a failed (``require``) group is refused ``array-unavailable``."""
        if group is not None and group["state"] == a.FAILED:
            return Rejection(reasons.ARRAY_UNAVAILABLE, group["reason"] or "the array group failed")
        return None

    async def on_planning_wait(self, session: AsyncSession, run: dict[str, Any], group: dict[str, Any] | None,
                               wait: Wait) -> Wait | Rejection:
        """Planning holds a forming group's child (``wait``): at a concurrent-Run limit
        the group may settle now (:func:`~execution_core.domain.arrays.held_at_limit`).
        Returns the verdict to record: ``wait``, or ``array-unavailable`` when a
        ``require`` group failed."""
        if group is None or group["state"] != a.FORMING or wait.code != reasons.WAIT_CONCURRENT_RUN_LIMIT:
            return wait
        settled = a.held_at_limit(group["mode"], group["size"], wait.limit)
        if settled is None:
            return wait
        state, reason = settled
        await self._fall_back(session, group["group_id"], state, reason, except_run=run["run_id"])
        return Rejection(reasons.ARRAY_UNAVAILABLE, reason) if state == a.FAILED else wait

    async def on_planned(self, session: AsyncSession, run: dict[str, Any], group: dict[str, Any] | None,
                         verdict: Plan | Rejection, attempt_id: str) -> Plan | Rejection:
        """Record the planning verdict on the group; return the verdict to record (a
        ``require`` group that cannot be an array refuses the child)."""
        if group is None:
            return verdict
        gid = group["group_id"]
        if isinstance(verdict, Rejection):
            if group["state"] == a.FORMING:
                await self.arrays.add_dropped(session, gid)
                await self._settle_row(session, await self.arrays.find_group(session, gid), await self.store.now(session),
                                       except_run=run["run_id"])
            return verdict
        if group["state"] == a.FORMING and not group["site_id"]:
            if verdict.environment != SLURM or verdict.family != QUEUED_BATCH:
                state, reason = a.not_an_array(group["mode"], f"Site {verdict.site_id} is a {verdict.environment} "
                                                              "Site, not a Slurm Site")
                await self._fall_back(session, gid, state, reason, except_run=run["run_id"])
                if state == a.FAILED:
                    return Rejection(reasons.ARRAY_UNAVAILABLE, reason)
            else:
                await self.arrays.update_group(session, gid, {"site_id": verdict.site_id,
                                                              "environment": verdict.environment})
        await self.arrays.set_member_attempt(session, run["run_id"], attempt_id, 1)
        return verdict

    # ------------------------------------------------------------------ supervision
    async def facts_for_step(self, session: AsyncSession, run: dict[str, Any], current: dict[str, Any] | None,
                             now: datetime) -> a.ArrayFacts | None:
        """The current Attempt's group facts; a forming group is locked and settled first."""
        if not run.get("array_group_id") or current is None:
            return None
        row = await self.arrays.facts_of_run(session, run["run_id"])
        if row is None:
            return None
        if row["member_attempt_id"] != current["attempt_id"]:
            # A later Attempt starts on its own, except under a failed ``require`` group.
            return _facts(row) if row["state"] == a.FAILED else None
        if row["state"] == a.FORMING:
            row = await self.arrays.facts_of_run(session, run["run_id"], for_update=True)
            assert row is not None
            if await self._settle_row(session, row, now, except_run=run["run_id"]):
                row = await self.arrays.facts_of_run(session, run["run_id"])
                assert row is not None
        if row["state"] == a.INDIVIDUAL and not row["slot"]:
            # The slot count is read and taken under the group's lock.
            row = await self.arrays.facts_of_run(session, run["run_id"], for_update=True)
            assert row is not None
            return _facts(row, slot_free=row["individual_active"] < row["max_active"])
        return _facts(row)

    async def after_decision(self, session: AsyncSession, run: dict[str, Any], facts: a.ArrayFacts | None,
                             d: Decision, now: datetime) -> None:
        """A step that ended a forming group's child drops it: the group settles now. A
        child of an individual group takes a maxActive slot with its start and frees it
        when it ends."""
        if facts is None:
            return
        ended = d.end is not None or (d.attempt is not None and d.attempt.ended)
        change = a.slot_change(facts, any(kind == "start" for kind, _ in d.commands), ended)
        if change == "take":
            await self.arrays.take_slot(session, facts.group_id, run["run_id"])
        elif change == "free":
            await self.arrays.free_slot(session, facts.group_id, run["run_id"])
        if facts.state != a.FORMING or not ended:
            return
        await self.arrays.add_dropped(session, facts.group_id)
        row = await self.arrays.find_group(session, facts.group_id, for_update=True)
        await self._settle_row(session, row, now, except_run=run["run_id"])

    async def _settle_row(self, session: AsyncSession, row: dict[str, Any] | None, now: datetime, *,
                          except_run: str) -> bool:
        """Apply :func:`~execution_core.domain.arrays.settle` to a locked group row;
        True when its state changed."""
        if row is None:
            return False
        verdict = a.settle(a.GroupFacts(state=row["state"], mode=row["mode"], size=row["size"],
                                        prepared=row["prepared"], dropped=row["dropped"],
                                        deadline=row["deadline"]), now)
        if verdict.action == "dispatch":
            await self._dispatch(session, row, except_run=except_run)
            return True
        if verdict.action in (a.INDIVIDUAL, a.FAILED):
            await self._fall_back(session, row["group_id"], verdict.action, verdict.reason, except_run=except_run)
            return True
        return False

    async def _fall_back(self, session: AsyncSession, group_id: str, state: str, reason: str, *,
                         except_run: str) -> None:
        await self.arrays.update_group(session, group_id, {"state": state, "reason": reason[:a.MAX_REASON]})
        await self.arrays.wake_members(session, group_id, except_run=except_run)

    async def _dispatch(self, session: AsyncSession, group: dict[str, Any], *, except_run: str) -> None:
        """Save the group's one start-array command (and its outbox message) and mark it
        dispatched, in the caller's transaction."""
        gid = group["group_id"]
        members = await self.arrays.members(session, gid)
        first = members[0]
        run0 = await self.store.find_run(session, first["run_id"])
        assert run0 is not None and first["attempt_id"]
        command_id = a.start_array_command_id(gid)
        payload = a.start_array_payload(gid, group["max_active"], [
            (m["index"], m["run_id"], m["attempt_id"], m["attempt_number"] or 1) for m in members])
        await self.store.insert_command(session, {
            "command_id": command_id, "run_id": first["run_id"], "attempt_id": first["attempt_id"],
            "kind": a.START_ARRAY, "ordinal": 1, "site_id": group["site_id"],
            "environment": group["environment"], "payload": payload,
        })
        await self.outbox.send_command(
            session,
            sc.AppendSiteCommand(
                metadata=common_pb2.CommandMetadata(command_id=command_id,
                                                    acting_member=run0["initiating_member"],
                                                    project=run0["project"]),
                site_id=group["site_id"], environment=group["environment"], kind=a.START_ARRAY,
                run_id=first["run_id"], attempt_id=first["attempt_id"],
                attempt_number=first["attempt_number"] or 1, payload_json=canonical_json(payload),
                # The index-0 child's prepare: its Attempt carries the start-array command.
                after_command_id=command_id_of(first["attempt_id"], "prepare", 1),
            ),
            aggregate_id=f"run:{first['run_id']}",
        )
        await self.arrays.update_group(session, gid, {"state": a.DISPATCHED, "command_id": command_id})
        await self.arrays.wake_members(session, gid, except_run=except_run)

    # ------------------------------------------------------------------ results
    async def on_prepare_result(self, session: AsyncSession, command: dict[str, Any], outcome: str) -> None:
        """A member's prepare succeeded: count it on its forming group (one UPDATE)."""
        if command["kind"] == "prepare" and outcome == "succeeded":
            await self.arrays.count_prepare(session, command["attempt_id"], True)

    async def on_start_array_result(self, session: AsyncSession, command: dict[str, Any],
                                    result: dict[str, Any]) -> None:
        """The Site answered the group's start-array: record each child's own start (its
        task's native jobs) or the refusal's fallback, and wake every child."""
        group = await self.arrays.group_of_attempt(session, command["attempt_id"])
        if group is None or group["state"] != a.DISPATCHED or group["command_id"] != command["command_id"]:
            return
        gid = group["group_id"]
        if result["outcome"] == "succeeded":
            now = await self.store.now(session)
            tasks = a.task_results(result)
            rows = []
            for m in await self.arrays.members(session, gid):
                own = tasks.get(m["attempt_id"] or "")
                if own is None:
                    continue  # left to its own start, which the Runtime answers with its task
                start_id = command_id_of(m["attempt_id"], "start", 1)
                rows.append({
                    "command_id": start_id, "run_id": m["run_id"], "attempt_id": m["attempt_id"],
                    "kind": "start", "ordinal": 1, "site_id": group["site_id"],
                    "environment": group["environment"], "payload": {}, "outcome": "succeeded",
                    "code": None, "result": {**own, "command_id": start_id}, "result_at": now,
                    "relayed_by": command["command_id"],
                })
            await self.arrays.insert_relayed_starts(session, rows)
            await self.arrays.update_group(session, gid, {"state": a.STARTED})
        else:
            state, reason = a.after_refusal(group["mode"], result.get("code") or "", result.get("message") or "")
            await self.arrays.update_group(session, gid, {"state": state, "reason": reason})
        await self.arrays.wake_members(session, gid)


def _facts(row: dict[str, Any], *, slot_free: bool = False) -> a.ArrayFacts:
    return a.ArrayFacts(group_id=row["group_id"], index=row["index"], state=row["state"], mode=row["mode"],
                        deadline=row["deadline"], reason=row["reason"], command_id=row["command_id"] or "",
                        command_seq=row["command_seq"] or 0, command_at=row["command_at"],
                        slot=row["slot"], slot_free=slot_free)
