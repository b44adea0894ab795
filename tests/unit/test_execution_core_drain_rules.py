"""A draining Site gets no new Attempts (docs/operators.md, Draining a Site):
planning waits with ``site-draining``; a retry's next Attempt waits the same way
and goes on once the Site is resumed; a cancel still ends the waiting Run."""

from __future__ import annotations

from dataclasses import replace

from execution_core.domain import lifecycle as lc
from execution_core.domain import reasons
from execution_core.domain import states as s
from execution_core.domain.planning import Plan, Wait, plan
from tests.unit.execution_core_lifecycle_sim import T0, TIMING, Sim
from tests.unit.test_execution_core_planning import K8S, SLURM, inp


def test_planning_skips_a_draining_site_with_a_visible_reason():
    verdict = plan(inp(draining=frozenset({"lab-slurm"})))
    assert verdict == Wait(reasons.WAIT_SITE_DRAINING, "every eligible Site is draining: lab-slurm")
    other = replace(SLURM, site_id="lab-slurm-2")
    bindings = {**inp().bindings, "lab-slurm-2": inp().bindings["lab-slurm"]}
    chosen = plan(inp(sites=(SLURM, other, K8S), bindings=bindings,
                      draining=frozenset({"lab-slurm"})))
    assert isinstance(chosen, Plan) and chosen.site_id == "lab-slurm-2"
    # A Site that is not ready says so first: draining it changes nothing there.
    not_ready = plan(inp(sites=(replace(SLURM, ready=False),), draining=frozenset({"lab-slurm"})))
    assert isinstance(not_ready, Wait) and not_ready.code == reasons.WAIT_SITE_NOT_READY


def test_a_run_without_an_attempt_waits_for_one_while_the_site_drains():
    run = lc.RunView(run_id="r1", family=s.QUEUED_BATCH, desired_state=s.DESIRED_RUN,
                     phase=s.PHASE_PREPARING, max_attempts=1, backoff_seconds=0.0,
                     material={"spec": {}}, site_draining=True)
    held = lc.decide(run, None, T0, TIMING)
    assert held.new_attempt_number is None and not held.commands
    assert held.waiting_reason == reasons.WAIT_SITE_DRAINING and held.wake_at > T0
    started = lc.decide(replace(run, site_draining=False), None, T0, TIMING)
    assert started.new_attempt_number == 1 and started.waiting_reason == ""
    cancelled = lc.decide(replace(run, desired_state=s.DESIRED_CANCEL), None, T0, TIMING)
    assert cancelled.end == (s.OUTCOME_CANCELLED, reasons.CANCELLED_BEFORE_START)


def test_a_retry_waits_while_the_site_drains_then_goes_on():
    sim = Sim(max_attempts=2, backoff=30)
    sim.run_until_observed()
    sim.result("observe", phase="failed", failure={"code": "exit-nonzero"})
    assert sim.step().phase == s.PHASE_RETRY_WAIT
    sim.run = replace(sim.run, site_draining=True)
    sim.wait(40)  # the back-off is over, but the Site drains
    held = sim.step()
    assert held.new_attempt_number is None and not held.commands
    assert held.phase == s.PHASE_RETRY_WAIT and held.waiting_reason == reasons.WAIT_SITE_DRAINING
    sim.run = replace(sim.run, site_draining=False)
    resumed = sim.step()
    assert resumed.new_attempt_number == 2 and [k for k, _ in resumed.commands] == ["prepare"]
