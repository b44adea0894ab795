"""Redaction, affected ids and the record shape of the audit (docs/operators.md, Audit)."""

from __future__ import annotations

import json

import pytest

from metallo.audit import (
    ACCEPTED,
    DRY_RUN,
    REDACTED,
    REFUSED,
    AuditEntry,
    AuditTrail,
    affected_ids,
    redact,
    redact_text,
    request_summary,
)
from metallo.audit.records import append_only_ddl
from metallo.common.v1 import common_pb2
from metallo.execution_core.v1 import execution_core_pb2 as ec
from metallo.operator_requests import create_grant_command, new_grant_secret
from metallo.site_coordination.v1 import site_coordination_pb2 as sc

JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJtLWFsaWNlIn0.c2lnbmF0dXJl"


@pytest.mark.parametrize("secret", [
    new_grant_secret(), JWT, "Bearer abcdefghijklmnop", "glpat-abcdefghijkl0123",
])
def test_credentials_are_redacted_inside_free_text(secret):
    text = redact_text(f"please {secret} thanks")
    assert secret not in text and text == f"please {REDACTED} thanks"


def test_a_password_in_a_url_is_redacted_and_the_rest_kept():
    assert redact_text("https://alice:s3cret@git.example/demo.git") == (
        f"https://{REDACTED}@git.example/demo.git")
    assert redact_text("https://git.example/demo.git") == "https://git.example/demo.git"


def test_secret_named_fields_are_dropped_whatever_they_hold():
    value = {"secret_sha256": "c" * 64, "member_token": "x", "log_text": "private output",
             "labels": {"api-token": "plain", "team": "ml"}, "context": "kept",
             "launch_key": "pipeline:1:step:2"}
    assert redact(value) == {"secret_sha256": REDACTED, "member_token": REDACTED,
                             "log_text": REDACTED, "labels": {"api-token": REDACTED, "team": "ml"},
                             "context": "kept", "launch_key": "pipeline:1:step:2"}


def test_summaries_are_bounded_and_leave_out_metadata():
    cmd = ec.CancelRun(metadata=common_pb2.CommandMetadata(command_id="c", acting_member="m"),
                       run_id="r", reason="x" * 1000)
    summary = request_summary(cmd)
    assert "metadata" not in summary and len(summary["reason"]) == 201
    many = ec.LaunchRun(workload_id="w", revision=1, labels={f"k{i}": "v" * 199 for i in range(16)})
    assert len(json.dumps(request_summary(many))) <= 4000


def test_a_grant_command_keeps_its_ids_but_never_its_secret():
    secret = new_grant_secret()
    cmd = create_grant_command("m-operator", "lab-slurm", "slurm", "2h", "lab", secret)
    reply = sc.CreateCommandGrantReply(grant=sc.CommandGrant(grant_id="cg-1", site_id="lab-slurm"))
    assert affected_ids(cmd, reply) == {"site_id": "lab-slurm", "grant_id": "cg-1"}
    assert request_summary(cmd)["secret_sha256"] == REDACTED


def test_affected_ids_skip_the_command_id_and_keep_the_first_naming():
    cmd = ec.RerunRun(metadata=common_pb2.CommandMetadata(command_id="c-1"), run_id="r-1")
    reply = ec.RerunRunReply(run_id="r-2", rerun_of="r-1")
    assert affected_ids(cmd, reply) == {"run_id": "r-1", "rerun_of": "r-1"}


def test_entries_are_checked_and_bounded():
    with pytest.raises(ValueError):
        AuditEntry(actor="m", principal="p", project="demo", action="a", decision="maybe").row()
    row = AuditEntry(actor="m" * 500, principal="", project="demo", action="run.launch",
                     decision="refused", code="permission-denied",
                     affected={"run_id": new_grant_secret(), "empty": ""},
                     summary={"token": "t"}).row()
    assert len(row["actor"]) == 200 and row["affected"] == {"run_id": REDACTED}
    assert row["summary"] == {"token": REDACTED}


def test_the_trigger_refuses_update_delete_and_truncate():
    ddl = " ".join(append_only_ddl())
    assert "BEFORE UPDATE OR DELETE ON audit_records" in ddl
    assert "BEFORE TRUNCATE ON audit_records" in ddl and "ERRCODE = '42501'" in ddl


def test_control_characters_are_kept_escaped_since_postgres_stores_no_nul():
    from metallo.audit.redaction import redact

    assert redact({"x": "a\x00b", "k\x01": "tab\there"}) == {
        "x": "a\\x00b", "k\\x01": "tab\\x09here"}


def test_an_accepted_dry_run_is_recorded_as_a_dry_run():
    trail = AuditTrail("execution_core", {ec.ReconcileRun: "run.reconcile", ec.CancelRun: "run.cancel"})
    meta = common_pb2.CommandMetadata(command_id="c-1", acting_member="m-ops")

    def decision(command, decided=ACCEPTED, code=""):
        entry = trail.entry(command, principal="cli", correlation_id=None, decision=decided, code=code)
        return entry.row()["decision"]

    assert decision(ec.ReconcileRun(metadata=meta, run_id="r-1", dry_run=True)) == DRY_RUN == "dry-run"
    assert decision(ec.ReconcileRun(metadata=meta, run_id="r-1")) == ACCEPTED
    # A refused dry run stays a refusal (with its code); a command without the field is unchanged.
    assert decision(ec.ReconcileRun(metadata=meta, run_id="r-1", dry_run=True),
                    REFUSED, "not-found") == REFUSED
    assert decision(ec.CancelRun(metadata=meta, run_id="r-1")) == ACCEPTED


def test_a_dry_runs_record_says_what_it_concluded():
    from execution_core.adaptors.audit import TRAIL

    meta = common_pb2.CommandMetadata(command_id="c-1", acting_member="m-ops")
    command = ec.ReconcileRun(metadata=meta, run_id="r-1", decision="mark-lost", dry_run=True)

    def row(reply):
        return TRAIL.entry(command, principal="cli", correlation_id=None, decision=ACCEPTED,
                           reply=reply).row()

    allowed = row(ec.ReconcileRunReply(run_id="r-1", dry_run=True, eligible=True, attempt_number=2,
                                       will_retry=True, explanation="the Site does not know Attempt 2"))
    refused = row(ec.ReconcileRunReply(run_id="r-1", dry_run=True, eligible=False,
                                       explanation="the Site still observes Attempt 2"))
    assert (allowed["decision"], allowed["code"]) == ("dry-run", "allowed")
    assert allowed["summary"]["conclusion"]["would"] == "mark Attempt 2 lost; a new Attempt follows"
    assert (refused["decision"], refused["code"]) == ("dry-run", "not-reconcilable")
    assert refused["summary"]["conclusion"]["allowed"] is False
    assert refused["summary"]["conclusion"]["explanation"] == "the Site still observes Attempt 2"
    # A real decision keeps the request's summary only.
    real = TRAIL.entry(ec.ReconcileRun(metadata=meta, run_id="r-1", decision="mark-lost"),
                       principal="cli", correlation_id=None, decision=ACCEPTED,
                       reply=ec.ReconcileRunReply(run_id="r-1", eligible=True)).row()
    assert (real["code"], "conclusion" in real["summary"]) == ("", False)
