"""When an array task's repository grant is renewed (``domain/grant_renewal.py``):
pure rules, the clock handed in; and the Site setting of the margin."""

from __future__ import annotations

import pytest

from site_runtime.adaptors.slurm.settings import SettingsError, SlurmSettings
from site_runtime.domain.grant_renewal import (
    DEFAULT_RENEW_SECONDS,
    expiry_epoch,
    parse_material,
    renewal_due,
    renewal_margin,
    renewed_material,
    revocation_needed,
)
from site_runtime.domain.slurm_array_start import material_bytes

HOUR = 3600.0


def test_the_margin_is_the_setting_or_half_the_lifetime_whichever_is_smaller():
    assert renewal_margin(2 * HOUR, DEFAULT_RENEW_SECONDS) == 1800
    assert renewal_margin(30.0, DEFAULT_RENEW_SECONDS) == 15.0
    assert renewal_margin(-5.0, DEFAULT_RENEW_SECONDS) == 0.0


def test_a_two_hour_grant_is_due_only_in_its_last_half_hour():
    issued = 1_000_000.0
    expires = issued + 2 * HOUR
    assert not renewal_due(issued, expires, issued, 1800)
    assert not renewal_due(issued, expires, expires - 1800, 1800)
    assert renewal_due(issued, expires, expires - 1799, 1800)
    assert renewal_due(issued, expires, expires + 10, 1800)  # expired: still renewed


def test_a_short_grant_is_due_after_half_its_lifetime_so_renewals_are_bounded():
    issued = 500.0
    expires = issued + 30
    assert not renewal_due(issued, expires, issued + 14.9, 1800)
    assert renewal_due(issued, expires, issued + 15.1, 1800)
    # Its successor, issued then, is not due again before half its own lifetime:
    # observing every second renews it at most once per 15 s, not per observe.
    successor = issued + 15.1
    due = [t for t in range(16, 45) if renewal_due(successor, successor + 30, issued + t, 1800)]
    assert due and min(due) >= 31


@pytest.mark.parametrize("expires", [None, 400.0, 500.0])
def test_a_grant_without_a_usable_expiry_is_never_due(expires):
    assert not renewal_due(500.0, expires, 10_000.0, 1800)


def test_expiry_reads_epoch_seconds_and_iso_8601_with_an_offset():
    assert expiry_epoch(1234.5) == 1234.5
    assert expiry_epoch("1970-01-01T01:00:00Z") == 3600.0
    assert expiry_epoch("1970-01-01T02:00:00+01:00") == 3600.0
    for unusable in ("", "soon", "1970-01-01T01:00:00", None, True):
        assert expiry_epoch(unusable) is None


def test_a_superseded_grant_past_its_expiry_needs_no_revocation_call():
    assert revocation_needed(1000.0, 1000.0 + 299)
    assert not revocation_needed(1000.0, 1000.0 + 301)
    assert revocation_needed(None, 10**9)


def test_a_renewed_file_keeps_every_entry_but_the_repository_identity():
    env = {
        "METALLO_ATTEMPT_ID": "a-1",
        "METALLO_GIT_USERNAME": "grant-stage-out",
        "METALLO_GIT_PASSWORD": "prt_old",
        "METALLO_PARAM_ITEM": "line one\nline two=x",
    }
    entries = parse_material(material_bytes(env))
    assert entries == env
    renewed = renewed_material(entries, "grant-stage-out-2", "prt_new")
    assert renewed == {
        **env,
        "METALLO_GIT_USERNAME": "grant-stage-out-2",
        "METALLO_GIT_PASSWORD": "prt_new",
    }
    assert parse_material(material_bytes(renewed)) == renewed


@pytest.mark.parametrize("data", [b"A=1", b"=1\x00", b"NOEQUALS\x00"])
def test_a_malformed_material_file_is_refused(data):
    with pytest.raises(ValueError):
        parse_material(data)


def test_a_file_without_a_grant_is_never_given_one():
    with pytest.raises(ValueError):
        renewed_material({"METALLO_ATTEMPT_ID": "a-1"}, "u", "prt_x")


def test_the_renewal_margin_is_a_site_setting_with_a_half_hour_default():
    required = {
        "SLURM_JWT_ISSUER": "https://issuer",
        "SLURM_JWT_AUTHORIZED_PARTY": "metallo",
        "SLURM_JWKS_URL": "file:/jwks.json",
        "RUNTIME_STATE_DIRECTORY": "/tmp/state",
    }
    assert SlurmSettings.from_env(required).array_grant_renew_seconds == DEFAULT_RENEW_SECONDS
    custom = SlurmSettings.from_env({**required, "SLURM_ARRAY_GRANT_RENEW_SECONDS": "600"})
    assert custom.array_grant_renew_seconds == 600
    with pytest.raises(SettingsError, match="SLURM_ARRAY_GRANT_RENEW_SECONDS"):
        SlurmSettings.from_env({**required, "SLURM_ARRAY_GRANT_RENEW_SECONDS": "0"})
