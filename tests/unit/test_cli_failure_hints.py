"""The next step ``metallo run show`` / ``run wait`` prints for a failed Run fits how its
last Attempt ended (docs/runs.md, Attempts): a refused Attempt says what the Site refused
and why, and points at no log (nothing ran); native work that failed points at the log
of the stage that failed. Real CLI and broker, a stand-in for Execution Core."""

from __future__ import annotations

import pytest

from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.messaging import Topology
from tests.unit.cli_support import StandIn, cli, cli_environment  # noqa: F401 - autouse fixture

RUN_ID = "9b1c7f7e-5d43-4d55-9f0e-0000000000f1"
NOT_SERVED = ("the Site's staging jobs fetch only from its own Git server: publish the "
              "repository there (metallo dev publish DIR)")


@pytest.fixture
def topology(namespace):
    return Topology(prefix=namespace)


def failed_run(*, attempt_state: str, reason_code: str, message: str = "",
               phases: tuple[str, ...] = (), jobs: tuple[str, ...] = (),
               failure_stage: str = "") -> ec.Run:
    run = ec.Run(run_id=RUN_ID, project="demo", action="train", action_type="slurm-job",
                 site_id="lab-slurm", phase="terminal", outcome="failed",
                 reason_code=reason_code, reason_message=message)
    attempt = run.attempts.add(number=1, state=attempt_state, reason_code=reason_code)
    for job_id, stage in enumerate(jobs, start=101):
        attempt.native_jobs.add(stage=stage, job_id=str(job_id))
    if failure_stage:
        attempt.exit.failure_stage = failure_stage
        attempt.exit.exit_code = 1
    for version, phase in enumerate((*phases, "terminal"), start=1):
        run.history.add(version=version, phase=phase, attempt_number=1)
    return run


async def _shown(amqp_url, topology, run: ec.Run) -> tuple[str, str]:
    async with StandIn(amqp_url, topology, ("execution_core",), {"GetRun": lambda q: run}):
        shown = await cli("run", "show", RUN_ID)
        waited = await cli("run", "wait", RUN_ID)
    assert shown.code == 0 and waited.code == 1  # show reads; wait exits by outcome
    return shown.stderr, waited.stderr


async def test_a_refusal_at_start_says_what_and_why_and_no_logs(amqp_url, topology):
    run = failed_run(attempt_state="refused", reason_code="repository-not-served",
                     message=NOT_SERVED, phases=("accepted", "preparing", "starting"))
    for stderr in await _shown(amqp_url, topology, run):
        hint = " ".join(stderr[stderr.index("next:"):].split())
        assert hint.startswith("next: the Site refused Attempt 1 at start "
                               f"(repository-not-served: {NOT_SERVED})")
        assert "no logs" in hint and f"metallo run rerun {RUN_ID}" in hint
        assert "run logs" not in hint and "--stage" not in hint


async def test_a_refusal_at_prepare_names_prepare(amqp_url, topology):
    run = failed_run(attempt_state="refused", reason_code="invalid-material",
                     message="repository.url must be https://", phases=("accepted", "preparing"))
    shown, _ = await _shown(amqp_url, topology, run)
    assert "the Site refused Attempt 1 at prepare (invalid-material: repository.url" in shown
    assert "run logs" not in shown


async def test_a_failed_stage_points_at_that_stages_log(amqp_url, topology):
    run = failed_run(attempt_state="failed", reason_code="stage-failed",
                     phases=("accepted", "preparing", "starting", "queued", "running"),
                     jobs=("stage-in", "compute", "stage-out"), failure_stage="stage-out")
    shown, _ = await _shown(amqp_url, topology, run)
    assert f"next: `metallo run logs {RUN_ID} --stage stage-out` shows what it wrote" in shown


async def test_a_failure_before_any_native_work_points_at_no_log(amqp_url, topology):
    run = failed_run(attempt_state="failed", reason_code="authorisation-refused",
                     message="no account at the Site", phases=("accepted", "preparing"))
    shown, _ = await _shown(amqp_url, topology, run)
    assert "failed before any native work started (authorisation-refused: no account" in shown
    assert "no logs" in shown and "run logs" not in shown


async def test_a_request_that_never_fits_names_the_resource_and_the_way_to_change_it(
    amqp_url, topology
):
    why = ("memory does not fit: the request asks for 99999 MiB on each of 1 node(s); partition "
           "compute's nodes have at most 16384 MiB (lower resources.memoryMiB to at most 16384)")
    run = failed_run(attempt_state="refused", reason_code="slurm-request-never-fits",
                     message=why, phases=("accepted", "preparing", "starting"))
    for stderr in await _shown(amqp_url, topology, run):
        hint = " ".join(stderr[stderr.index("next:"):].split())
        assert f"(slurm-request-never-fits: {why})" in hint
        assert "a rerun asks for the same resources" in hint and "actions.yaml" in hint
        assert "run logs" not in hint and "metallo run rerun" not in hint


async def test_a_requeued_job_says_slurm_requeued_it_and_how_to_go_on(amqp_url, topology):
    from execution_core.domain.end_messages import site_end_message

    why = site_end_message("slurm-job-requeued",
                           {"failure_stage": "compute", "scheduler_state": "PENDING"})
    run = failed_run(attempt_state="failed", reason_code="slurm-job-requeued", message=why,
                     phases=("accepted", "preparing", "starting", "queued", "running"),
                     jobs=("stage-in", "compute", "stage-out"), failure_stage="compute")
    for stderr in await _shown(amqp_url, topology, run):
        hint = " ".join(stderr[stderr.index("next:"):].split())
        assert hint.startswith("next: Slurm requeued the compute job of Attempt 1 "
                               "(slurm-job-requeued: the Site's scheduler requeued its compute job")
        assert f"metallo run rerun {RUN_ID}" in hint and "Site admin" in hint


async def test_a_run_cancelled_at_the_site_says_so_and_what_to_do(amqp_url, topology):
    from execution_core.domain.end_messages import site_end_message

    why = site_end_message("cancelled-at-site",
                           {"failure_stage": "compute", "scheduler_state": "CANCELLED"})
    run = failed_run(attempt_state="cancelled", reason_code="cancelled-at-site", message=why,
                     phases=("accepted", "preparing", "starting", "queued", "running"),
                     jobs=("stage-in", "compute"), failure_stage="compute")
    run.outcome = "cancelled"
    run.attempts[0].exit.scheduler_state = "CANCELLED"
    async with StandIn(amqp_url, topology, ("execution_core",),
                       {"GetRun": lambda q: run,
                        "ListRuns": lambda q: ec.ListRunsReply(runs=[run])}):
        shown = await cli("run", "show", RUN_ID)
        listed = await cli("run", "list")
    assert shown.code == 0
    text = " ".join(shown.stdout.split())
    assert "its compute job was cancelled at the Site (scheduler state CANCELLED)" in text
    hint = " ".join(shown.stderr[shown.stderr.index("next:"):].split())
    assert "the Site cancelled its native work" in hint and "Site admin" in hint
    assert f"metallo run rerun {RUN_ID}" in hint and "scancel" in hint
    # run list tells a Site's cancellation from a member's.
    assert "cancelled-at-site" in " ".join(listed.stdout.split()), listed.stdout
