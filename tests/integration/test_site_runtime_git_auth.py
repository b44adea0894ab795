"""Stage git authenticates with its first request (the repository credentials as a
Basic header scoped to the repository's URL): no 401 round trip, no askpass run."""

from __future__ import annotations

import asyncio
import time

from site_runtime.adaptors.local.stage_runner import Runner
from tests.integration.site_coordination_support import OPERATOR_TOKEN
from tests.integration.site_runtime_support import seed_repository


async def test_a_fetch_needs_no_askpass_and_a_wrong_token_still_fails(edge, tmp_path):
    url, commit = await seed_repository(edge, tmp_path)
    marker = tmp_path / "askpass-ran"

    def runner(name: str, token: str) -> Runner:
        control = tmp_path / name / "control"
        control.mkdir(parents=True)
        askpass = control / "askpass.sh"  # the runner keeps an existing helper
        askpass.write_text(f"#!/bin/sh\necho \"$1\" >> {marker}\n")
        askpass.chmod(0o700)
        spec = {
            "stage": "stage-in",
            "repo_dir": str(tmp_path / name / "repo"),
            "log_file": str(tmp_path / name / "stage-in.log"),
            "repository": {"url": url, "commit": commit, "branch": "main"},
            "repository_ca_file": str(edge.ca_file),
            "author": {"name": "Metallo", "email": "metallo@localhost"},
        }
        r = Runner(control, spec, {"METALLO_GIT_USERNAME": "operator", "METALLO_GIT_TOKEN": token})
        r.deadline = time.monotonic() + 60
        return r

    good = runner("good", OPERATOR_TOKEN)
    env = good.repo.git_env()
    assert env["GIT_CONFIG_KEY_0"] == f"http.{url}.extraHeader"
    assert env["GIT_CONFIG_VALUE_0"].startswith("Authorization: Basic ")
    # git would carry the header on to a redirect's host: no redirects are followed.
    assert (env["GIT_CONFIG_KEY_1"], env["GIT_CONFIG_VALUE_1"]) == (
        f"http.{url}.followRedirects", "false")
    assert await asyncio.to_thread(good.stage_in) == {"exit_code": 0}
    assert not marker.exists()  # authenticated at once: git never asked for credentials
    assert OPERATOR_TOKEN not in (tmp_path / "good" / "stage-in.log").read_text()

    bad = runner("bad", "lgt_" + "0" * 43)
    outcome = await asyncio.to_thread(bad.stage_in)
    assert outcome["code"] == "stage-in-failed"
    assert marker.exists()  # refused: git fell back to askpass, which cannot help
