"""Wiring of ``python -m site_runtime``: settings from options or environment, the
slurm executor imported only when chosen, and the worker's bounded back-off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from site_runtime.__main__ import SettingsError, main, parse_args
from site_runtime.application.worker import Backoff

ROOT = Path(__file__).resolve().parents[2]


def test_environment_equivalents_fill_the_options():
    env = {
        "SITE_API_URL": "https://edge:8443",
        "SITE_API_CA_FILE": "/ca.pem",
        "SITE_API_CREDENTIAL_FILE": "/grant",
        "RUNTIME_STATE_DIRECTORY": "/state",
        "RUNTIME_EXECUTOR": "local",
    }
    args = parse_args([], env)
    assert (args.edge, args.ca, args.grant_file, args.state_dir, args.executor) == (
        "https://edge:8443",
        "/ca.pem",
        "/grant",
        "/state",
        "local",
    )
    assert parse_args(["--state-dir", "/other"], env).state_dir == "/other"


@pytest.mark.parametrize(
    "missing", ["SITE_API_URL", "RUNTIME_STATE_DIRECTORY", "SITE_API_CREDENTIAL_FILE"]
)
def test_missing_settings_stop_before_anything_opens(missing, tmp_path, capsys):
    env = {
        "SITE_API_URL": "https://edge:8443",
        "SITE_API_CREDENTIAL_FILE": "/grant",
        "RUNTIME_STATE_DIRECTORY": str(tmp_path / "state"),
    }
    del env[missing]
    with pytest.raises(SettingsError):
        parse_args([], env)
    assert main([], env) == 2
    assert not (tmp_path / "state").exists()


def test_malformed_local_setting_stops_the_runtime(tmp_path):
    env = {
        "SITE_API_URL": "https://127.0.0.1:9",
        "SITE_API_CREDENTIAL": "psb_x",
        "RUNTIME_STATE_DIRECTORY": str(tmp_path / "state"),
        "RUNTIME_LOCAL_MAX_ACTIVE": "many",
    }
    assert main([], env) == 2
    assert not (tmp_path / "state" / "delivery.sqlite").exists()


def test_the_slurm_executor_is_imported_only_when_chosen():
    code = (
        "import sys, site_runtime.__main__ as m; "
        "print(any(n.startswith('site_runtime.adaptors.slurm') for n in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "False"


def test_backoff_is_exponential_and_bounded():
    backoff = Backoff(initial=0.5, maximum=4.0)
    assert [backoff.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_a_malformed_slurm_setting_stops_the_runtime_with_status_2(tmp_path):
    env = {
        "SITE_API_URL": "https://127.0.0.1:9",
        "SITE_API_CREDENTIAL": "psb_x",
        "RUNTIME_STATE_DIRECTORY": str(tmp_path / "state"),
        "SLURM_STAGING_CPUS": "0",
    }
    assert main(["--executor", "slurm"], env) == 2
    assert not (tmp_path / "state" / "delivery.sqlite").exists()


@pytest.mark.parametrize(
    "changes",
    [
        {},  # no KUBERNETES_KUBECONFIG nor KUBERNETES_SITE_ID
        {"KUBERNETES_SITE_ID": "lab-k8s", "KUBERNETES_KUBECONFIG": "/nonexistent/kubeconfig"},
        {"KUBERNETES_SITE_ID": "lab-k8s", "KUBERNETES_KUBECONFIG": "/etc/hostname",
         "KUBERNETES_GPU_CLASSES": "[not json"},
    ],
)
def test_a_malformed_kubernetes_setting_stops_the_runtime_with_status_2(tmp_path, changes, capsys):
    env = {
        "SITE_API_URL": "https://127.0.0.1:9",
        "SITE_API_CREDENTIAL": "psb_x",
        "RUNTIME_STATE_DIRECTORY": str(tmp_path / "state"),
        **changes,
    }
    assert main(["--executor", "kubernetes"], env) == 2
    assert "kubernetes executor:" in capsys.readouterr().err
    assert not (tmp_path / "state" / "delivery.sqlite").exists()
    assert not (tmp_path / "state" / "jobs.sqlite").exists()
