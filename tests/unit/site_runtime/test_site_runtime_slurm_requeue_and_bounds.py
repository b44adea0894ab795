"""The v0.0.38 wire form of ``requeue``, the requeue flag read back from a job record,
the reconciliation and pending-bound settings, and the per-Attempt pending rule."""

from __future__ import annotations

import pytest

from site_runtime.adaptors.slurm.errors import SiteWideDeferred, deferred
from site_runtime.adaptors.slurm.responses import parse_job
from site_runtime.adaptors.slurm.rest import SlurmJobRequeueable, SlurmRefused
from site_runtime.adaptors.slurm.settings import SettingsError, SlurmSettings
from site_runtime.domain.native_errors import attempt_pending_expired, pending_confidence
from site_runtime.domain.slurm_jobs import wire_job

REQUIRED = {
    "SLURM_JWT_ISSUER": "https://issuer",
    "SLURM_JWT_AUTHORIZED_PARTY": "metallo",
    "SLURM_JWKS_URL": "file:/x",
    "RUNTIME_STATE_DIRECTORY": "/tmp/x",
}


def test_requeue_false_is_sent_as_no_requeue_and_the_saved_request_is_untouched():
    job = {"name": "n", "requeue": False}
    assert wire_job(job) == {"name": "n", "no_requeue": True}
    assert job == {"name": "n", "requeue": False}
    assert wire_job({"requeue": True}) == {"requeue": True}
    assert wire_job({"name": "n"}) == {"name": "n"}


def test_the_requeue_flag_is_read_from_the_job_record():
    base = {"job_id": 7, "job_state": "PENDING", "name": "n"}
    assert parse_job({**base, "requeue": False}, "slurmctld").requeue is False
    assert parse_job({**base, "requeue": True}, "slurmctld").requeue is True
    assert parse_job(base, "slurmdbd").requeue is None


def test_a_requeueable_job_is_a_definite_refusal_with_its_own_code():
    refused = SlurmJobRequeueable()
    assert isinstance(refused, SlurmRefused) and refused.code == "slurm-job-requeueable"


def test_reconciliation_settings_default_and_parse():
    default = SlurmSettings.from_env(REQUIRED)
    assert (default.reconciliation.lost_seconds, default.reconciliation.requeue_seconds) == (
        600,
        300,
    )
    assert default.attempt_pending_seconds == 60
    custom = SlurmSettings.from_env(
        {
            **REQUIRED,
            "SLURM_LOST_DEADLINE_SECONDS": "30",
            "SLURM_REQUEUE_DEADLINE_SECONDS": "20",
            "SLURM_ATTEMPT_PENDING_SECONDS": "5",
        }
    )
    assert (custom.reconciliation.lost_seconds, custom.reconciliation.requeue_seconds) == (30, 20)
    assert custom.attempt_pending_seconds == 5
    with pytest.raises(SettingsError, match="SLURM_LOST_DEADLINE_SECONDS"):
        SlurmSettings.from_env({**REQUIRED, "SLURM_LOST_DEADLINE_SECONDS": "0"})


def test_only_site_wide_troubles_are_site_wide_deferrals():
    assert isinstance(deferred("slurm-unreachable"), SiteWideDeferred)
    assert isinstance(deferred("issuer-keys-unavailable"), SiteWideDeferred)
    assert not isinstance(deferred("slurm-uncertain"), SiteWideDeferred)
    assert not isinstance(deferred("member-token-unusable"), SiteWideDeferred)


@pytest.mark.parametrize(
    ("since", "now", "expired"), [(None, 100.0, False), (50.0, 109.0, False), (50.0, 110.0, True)]
)
def test_a_pending_attempt_condition_is_bounded(since, now, expired):
    assert attempt_pending_expired(since, now, 60) is expired


def test_the_confidence_after_a_bounded_wait():
    assert pending_confidence("slurm-observation-unavailable") == "uncertain"
    assert pending_confidence("identity-provider-unavailable") == "stale"


def test_the_job_list_is_indexed_by_id_and_name():
    from site_runtime.domain.slurm_jobs import JobList

    base = {"job_state": "PENDING", "name": "n"}
    jobs = JobList(
        [
            parse_job({**base, "job_id": 1}, "slurmctld"),
            parse_job({**base, "job_id": 2}, "slurmctld"),
            parse_job({**base, "job_id": 3, "name": "m"}, "slurmctld"),
        ]
    )
    assert len(jobs) == 3 and jobs.by_id["2"].job_id == "2"
    assert [j.job_id for j in jobs.by_name["n"]] == ["1", "2"] and "x" not in jobs.by_name
