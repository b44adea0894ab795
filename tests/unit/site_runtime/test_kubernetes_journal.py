"""The kubernetes executor's jobs.sqlite: intents, exact uids, tombstones, saved results."""

from __future__ import annotations

from site_runtime.adaptors.kubernetes.journal import KubernetesJournal


def journal(tmp_path) -> KubernetesJournal:
    j = KubernetesJournal(tmp_path / "jobs.sqlite")
    j.insert_attempt("a1", "r1", 1, {"material_digest": "sha256:x"}, "metallo-demo")
    return j


def test_an_intent_is_recorded_once_and_a_uid_only_for_a_live_role(tmp_path):
    j = journal(tmp_path)
    first = j.intent("a1", "compute", "Job", "mt-a1-run")
    assert (first.state, first.uid) == ("intent", None)
    assert j.intent("a1", "compute", "Job", "other-name").name == "mt-a1-run"  # idempotent
    j.created("a1", "compute", "uid-1")
    assert (j.object("a1", "compute").state, j.object("a1", "compute").uid) == ("created", "uid-1")


def test_a_tombstone_is_never_brought_back(tmp_path):
    j = journal(tmp_path)
    j.intent("a1", "workspace", "PersistentVolumeClaim", "mt-a1-ws")
    j.created("a1", "workspace", "uid-w")
    j.deleting("a1", "workspace")
    assert j.object("a1", "workspace").state == "deleting"
    j.deleted("a1", "workspace")
    j.created("a1", "workspace", "uid-again")  # a late answer must not revive it
    j.reopen("a1", "workspace")  # only half-made Secrets may be reopened
    assert j.object("a1", "workspace").state == "deleted"
    j.tombstone("a1", "stage-out", "Pod", "-")
    assert j.object("a1", "stage-out").state == "deleted"


def test_cleanup_is_pending_until_every_object_is_gone_and_every_grant_released(tmp_path):
    j = journal(tmp_path)
    j.intent("a1", "stage-in-secret", "Secret", "mt-a1-in")
    j.set_grant("a1", "stage-in-secret", "g-1")
    j.set_state("a1", "failed", code="stage-in-failed", ended_at=1.0, cleanup_due=2.0)
    assert j.cleanup_pending() == ["a1"] and j.active_attempts() == []
    j.deleted("a1", "stage-in-secret")
    assert j.cleanup_pending() == ["a1"]  # the grant is not released yet
    j.grant_released("a1", "stage-in-secret")
    assert j.cleanup_pending() == []
    row = j.attempt("a1")
    assert (row.state, row.code, row.cleanup_due) == ("failed", "stage-in-failed", 2.0)


def test_the_first_saved_result_is_the_one_replayed(tmp_path):
    j = journal(tmp_path)
    first = j.save_result("c1", {"command_id": "c1", "outcome": "succeeded"})
    again = j.save_result("c1", {"command_id": "c1", "outcome": "refused"})
    assert first == again == j.result("c1") == {"command_id": "c1", "outcome": "succeeded"}
