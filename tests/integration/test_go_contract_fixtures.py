"""The Go client decodes every byte fixture under contracts/fixtures with code that
protoc-gen-go generated from contracts/proto, encodes each back to the same bytes,
and finds each equal to its .json; a fixture it does not know fails it."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.go_client import ROOT, build_go_client

pytestmark = pytest.mark.integration
FIXTURES = ROOT / "contracts" / "fixtures"


@pytest.fixture(scope="module")
def go_client(tmp_path_factory):
    return build_go_client(tmp_path_factory.mktemp("gopath"))


def run(binary, fixtures):
    done = subprocess.run([str(binary), "-fixtures", str(fixtures)], capture_output=True,
                          text=True, timeout=120, check=False)
    return done.returncode, json.loads(done.stdout), done.stderr


def test_go_client_decodes_every_fixture(go_client):
    code, report, stderr = run(go_client, FIXTURES)
    assert code == 0, stderr
    assert report == {"client": "go", "ok": True,
                      "fixtures_decoded": len(list(FIXTURES.glob("*.hex")))}


def test_go_client_refuses_changed_bytes(go_client, tmp_path):
    for path in FIXTURES.glob("*"):
        shutil.copy(path, tmp_path / path.name)
    target = tmp_path / "metallo.execution_core.v1.LaunchRun.basic.hex"
    target.write_text(target.read_text().strip() + "a00601\n")  # field 100, unknown
    code, report, stderr = run(go_client, tmp_path)
    assert code == 1 and report["ok"] is False
    assert "LaunchRun.basic.hex" in stderr and "does not know" in stderr, stderr
