"""slurmrestd answers parsed from recorded fixtures (v0.0.38 and later shapes).

``fixtures/v0.0.38_*`` and ``fixtures/dbv0.0.38_*`` were recorded from the lab's
slurmrestd 22.05.8; ``*_shape.json`` follow the later API versions' shapes.
These tests need no Slurm.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from metallo.identity.verify import (
    JwksCache,
    MemberCredential,
    MemberTokenRejected,
    MemberTokenVerifier,
)
from site_runtime.adaptors.slurm.responses import (
    exit_status,
    job_state,
    number,
    parse_jobs,
    step_signal,
)
from site_runtime.adaptors.slurm.rest import (
    SlurmLimited,
    SlurmRefused,
    SlurmRest,
    SlurmUncertain,
    SlurmUnreachable,
)
from site_runtime.adaptors.slurm.settings import (
    SettingsError,
    SlurmSettings,
    parse_gpu_gres,
    parse_max_wall,
    parse_positive,
)
from site_runtime.domain.slurm_jobs import NativeIdentity, stage_identity

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str):
    return json.loads((FIXTURES / name).read_text())


def test_recorded_v0038_job_list_is_parsed():
    jobs = {j.job_id: j for j in parse_jobs(fixture("v0.0.38_jobs.json"), "slurmctld")}
    failed = jobs["3"]
    assert (failed.state, failed.exit_code, failed.signal) == ("FAILED", 3, None)
    assert (failed.name, failed.comment, failed.account, failed.user) == (
        "fx-fail",
        "metallo:fx:fail",
        "demo",
        "alice",
    )
    assert (jobs["4"].state, jobs["4"].signal) == ("FAILED", 9)
    assert jobs["5"].state == "CANCELLED" and jobs["5"].terminal
    pending = jobs["7"]
    assert (pending.state, pending.reason, pending.terminal) == ("PENDING", "Dependency", False)
    assert pending.dependency == "afterok:5(unfulfilled)"
    assert jobs["6"].started and not jobs["7"].started


def test_recorded_accounting_jobs_are_parsed_with_their_comment_and_signal():
    jobs = {j.job_id: j for j in parse_jobs(fixture("dbv0.0.38_jobs.json"), "slurmdbd")}
    assert jobs["3"].comment == "metallo:fx:fail" and jobs["3"].state == "FAILED"
    assert jobs["3"].source == "slurmdbd" and jobs["3"].user == "alice"
    assert (jobs["4"].state, jobs["4"].signal) == ("FAILED", 9)
    assert jobs["5"].state == "CANCELLED"


def test_later_api_shapes_are_parsed():
    jobs = {j.job_id: j for j in parse_jobs(fixture("v0.0.40_jobs_shape.json"), "slurmctld")}
    assert (jobs["501"].state, jobs["501"].exit_code) == ("COMPLETED", 0)
    assert (jobs["502"].state, jobs["502"].exit_code, jobs["502"].terminal) == (
        "PENDING",
        None,
        False,
    )
    assert (jobs["503"].state, jobs["503"].exit_code) == ("FAILED", 3)
    assert (jobs["504"].state, jobs["504"].signal) == ("CANCELLED", 15)
    db = parse_jobs(fixture("dbv0.0.40_jobs_shape.json"), "slurmdbd")[0]
    assert (db.state, db.comment, db.user, db.exit_code) == (
        "COMPLETED",
        "metallo:r-9:a-9:stage-in",
        "alice",
        0,
    )


def test_absent_errors_and_jobs_are_tolerated():
    assert parse_jobs({"meta": {}}, "slurmctld") == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (5, 5),
        ({"set": True, "infinite": False, "number": 7}, 7),
        ({"set": False, "number": 7}, None),
        ({"set": True, "infinite": True, "number": 0}, None),
        ("12", 12),
        (None, None),
        (True, None),
    ],
)
def test_numbers_in_every_shape(value, expected):
    assert number(value) == expected


def test_job_states_and_exit_statuses():
    assert job_state("RUNNING") == ("RUNNING", ())
    assert job_state(["PENDING", "REQUEUED"]) == ("PENDING", ("REQUEUED",))
    assert job_state({"current": ["COMPLETED"], "reason": "None"}) == ("COMPLETED", ())
    assert exit_status(768) == (3, None)
    assert exit_status(9) == (None, 9)
    assert exit_status(0) == (0, None)
    assert exit_status(
        {"status": "SIGNALED", "return_code": None, "signal": {"signal_id": 9, "name": "Killed"}}
    ) == (None, 9)


def test_identity_names_and_comment():
    ident = stage_identity("metallo", "r-1", "a-1", "stage-out", "demo", "alice")
    assert ident == NativeIdentity("metallo-a-1-out", "metallo:r-1:a-1:stage-out", "demo", "alice")
    assert stage_identity("metallo", "r-1", "a-1", "compute", "demo", "alice").name == "metallo-a-1"


# ----------------------------------------------------------------- submission outcomes
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
JWK = {**json.loads(RSAAlgorithm.to_jwk(KEY.public_key())), "kid": "k1"}


class _Keys:
    async def fetch(self):
        return {"keys": [JWK]}


def _token(**changes) -> MemberCredential:
    now = int(time.time())
    claims = {
        "iss": "iss",
        "sub": "m-alice",
        "azp": "azp",
        "typ": "Bearer",
        "scope": "site_username",
        "site_username": "alice",
        "sun": "alice",
        "iat": now,
        "exp": now + 300,
    }
    claims.update(changes)
    return MemberCredential(jwt.encode(claims, KEY, algorithm="RS256", headers={"kid": "k1"}))


def _rest(handler) -> tuple[SlurmRest, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return handler(request)

    verifier = MemberTokenVerifier(issuer="iss", authorized_party="azp", keys=JwksCache(_Keys()))
    rest = SlurmRest("http://127.0.0.1:6820", verifier, allow_insecure_loopback=True)
    rest._client = httpx.AsyncClient(base_url=rest.base_url, transport=httpx.MockTransport(record))
    return rest, seen


def _answer(status: int, name: str):
    path = FIXTURES / name
    return lambda request: httpx.Response(status, content=path.read_bytes())


async def _submit(rest):
    return await rest.submit(
        script="#!/bin/bash\n",
        job={"name": "n", "environment": {"A": "1"}},
        secret_environment={"METALLO_GIT_PASSWORD": "prt_x"},
        credential=_token(),
        user="alice",
    )


async def test_a_held_submission_with_2042_is_a_success_and_carries_the_token_only_in_headers():
    rest, seen = _rest(_answer(200, "v0.0.38_submit_held_2042.json"))
    submitted = await _submit(rest)
    assert submitted.job_id.isdigit()
    request = seen[0]
    assert request.headers["X-SLURM-USER-NAME"] == "alice"
    token = request.headers["X-SLURM-USER-TOKEN"]
    assert token not in request.content.decode()
    assert json.loads(request.content)["job"]["environment"] == {
        "A": "1",
        "METALLO_GIT_PASSWORD": "prt_x",
    }


async def test_submission_outcomes_from_recorded_answers():
    with pytest.raises(SlurmRefused) as refused:
        await _submit(_rest(_answer(500, "v0.0.38_submit_refused_2005.json"))[0])
    assert refused.value.code == "slurm-error-2005"
    with pytest.raises(SlurmLimited):
        await _submit(_rest(_answer(500, "v0.0.38_submit_limited_2050.json"))[0])
    with pytest.raises(SlurmUncertain):
        await _submit(_rest(_answer(500, "error_not_json.txt"))[0])
    with pytest.raises(SlurmUncertain):  # an unknown-job error is not a definite refusal
        await _submit(_rest(_answer(500, "v0.0.38_job_unknown_2017.json"))[0])

    def lost(request):
        raise httpx.ReadTimeout("lost", request=request)

    with pytest.raises(SlurmUncertain):
        await _submit(_rest(lost)[0])

    def refused_connection(request):
        raise httpx.ConnectError("[Errno 111] Connection refused", request=request)

    with pytest.raises(SlurmUnreachable):
        await _submit(_rest(refused_connection)[0])


async def test_accounting_misses_and_query_errors():
    rest, _ = _rest(_answer(200, "dbv0.0.38_job_not_found_9003.json"))
    assert await rest.accounting_job("99999", credential=_token(), user="alice") is None
    rest, _ = _rest(_answer(500, "dbv0.0.38_query_error_9000.json"))
    with pytest.raises(SlurmUncertain):
        await rest.accounting_job("1", credential=_token(), user="alice")
    rest, _ = _rest(_answer(404, "error_not_json.txt"))
    with pytest.raises(SlurmUncertain):
        await rest.accounting_job("1", credential=_token(), user="alice")


async def test_one_list_request_serves_every_attempt_within_the_cache_time():
    rest, seen = _rest(_answer(200, "v0.0.38_jobs.json"))
    for _ in range(5):
        assert len(await rest.list_jobs(credential=_token(), user="alice")) == 5
    assert len(seen) == 1 and rest.list_requests == 1


async def test_a_bad_token_is_refused_before_any_request():
    rest, seen = _rest(_answer(200, "v0.0.38_jobs.json"))
    with pytest.raises(MemberTokenRejected):
        await rest.list_jobs(credential=_token(azp="other"), user="alice")
    with pytest.raises(MemberTokenRejected):
        await rest.list_jobs(credential=_token(), user="bob")
    assert seen == []


# ----------------------------------------------------------------- settings
BASE_ENV = {
    "SLURM_JWT_ISSUER": "iss",
    "SLURM_JWT_AUTHORIZED_PARTY": "azp",
    "SLURM_JWKS_URL": "https://issuer/jwks.json",
    "RUNTIME_STATE_DIRECTORY": "/tmp/x",
}


def test_settings_defaults_and_values():
    s = SlurmSettings.from_env(BASE_ENV)
    assert (s.staging.cpus, s.staging.memory_mib, s.staging.time_minutes, s.staging.partition) == (
        1,
        512,
        10,
        "staging",
    )
    assert s.gpu_gres == {} and s.max_wall_seconds is None and s.name_prefix == "metallo"
    s = SlurmSettings.from_env(
        {
            **BASE_ENV,
            "SLURM_STAGING_CPUS": "2",
            "SLURM_GPU_GRES": "gh200=gpu:nvidia_gh200_144g_hbm3e, a100=gpu:a100",
            "SLURM_MAX_WALL_SECONDS": "7200",
        }
    )
    assert s.staging.cpus == 2 and s.max_wall_seconds == 7200
    assert s.gpu_gres == {"gh200": "gpu:nvidia_gh200_144g_hbm3e", "a100": "gpu:a100"}


@pytest.mark.parametrize(
    "changes",
    [
        {"SLURM_STAGING_CPUS": "0"},
        {"SLURM_STAGING_MEMORY_MIB": "2147483648"},
        {"SLURM_STAGING_TIME_MINUTES": "ten"},
        {"SLURM_GPU_GRES": "a100"},
        {"SLURM_GPU_GRES": "a100=gpu a"},
        {"SLURM_GPU_GRES": "a=gpu:x,a=gpu:y"},
        {"SLURM_MAX_WALL_SECONDS": "-1"},
        {"SLURM_STAGING_PARTITION": "bad name"},
        {"SLURM_JWT_ISSUER": ""},
    ],
)
def test_malformed_settings_stop_startup(changes):
    with pytest.raises(SettingsError):
        SlurmSettings.from_env({**BASE_ENV, **changes})


def test_setting_parsers_bounds():
    assert parse_positive("X", "2147483647", 1) == 2147483647
    assert parse_positive("X", None, 4) == 4
    assert parse_gpu_gres("") == {} and parse_max_wall("") is None


SIGKILLED = {
    "status": "SIGNALED",
    "return_code": None,
    "signal": {"signal_id": 9, "name": "Killed"},
}


@pytest.mark.parametrize(
    ("exit_code", "derived", "expected"),
    [
        # A step killed by SIGKILL; the script passed it on as 137 (recorded from the lab).
        ({"status": "FAILED", "return_code": 137}, SIGKILLED, (None, 9)),
        (137 << 8, 9, (None, 9)),  # slurmctld's raw wait statuses
        # The command's own exit 137: no step died by a signal.
        (
            {"status": "FAILED", "return_code": 137},
            {"status": "SUCCESS", "return_code": 0},
            (137, None),
        ),
        (137 << 8, 0, (137, None)),
        # The script went on and succeeded, or itself died by a signal.
        ({"status": "SUCCESS", "return_code": 0}, SIGKILLED, (0, None)),
        (9, 9, (None, 9)),
        (1 << 8, None, (1, None)),
    ],
)
def test_a_step_killed_by_a_signal_is_that_signal(exit_code, derived, expected):
    code, signal = exit_status(exit_code)
    assert step_signal(code, signal, exit_status(derived)) == expected
