"""The Kubernetes lab beside the dev stack (``scripts/k8s-lab``, docs/k8s-lab.md).

``metallo dev up`` starts it when it can (root) and records where its kubeconfig is;
``metallo dev status`` shows it. A lab that cannot start is a warning, not a failure:
the stack's Slurm and local Sites do not need it.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from metallo.devstack.layout import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "k8s-lab"


def lab_state() -> Path:
    """``$METALLO_K8S_LAB_STATE`` or ``/var/lib/metallo-k8s-lab``."""
    return Path(os.environ.get("METALLO_K8S_LAB_STATE", "/var/lib/metallo-k8s-lab"))


def k8s_lab_status() -> dict:
    """``{"running": bool, "kubeconfig": path, "detail": last status line}``."""
    state = lab_state()
    if not SCRIPT.exists():
        return {"running": False, "kubeconfig": str(state / "kubeconfig"), "detail": "not in this checkout"}
    try:
        done = subprocess.run([str(SCRIPT), "status"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"running": False, "kubeconfig": str(state / "kubeconfig"), "detail": str(exc)}
    lines = [line for line in done.stdout.splitlines() if line.startswith("api")]
    return {"running": done.returncode == 0, "kubeconfig": str(state / "kubeconfig"),
            "detail": lines[0].split(None, 1)[1] if lines else done.stderr.strip()[-200:]}


def ensure_k8s_lab(say=print) -> dict:
    """Run ``scripts/k8s-lab up`` (root only), then report :func:`k8s_lab_status`."""
    if SCRIPT.exists() and os.geteuid() == 0:
        done = subprocess.run([str(SCRIPT), "up"], capture_output=True, text=True, timeout=120, check=False)
        if done.returncode != 0:
            say(f"warning: the Kubernetes lab did not start: {done.stderr.strip()[-300:]}")
    elif SCRIPT.exists():
        say("warning: the Kubernetes lab starts only as root (scripts/k8s-lab up)")
    found = k8s_lab_status()
    if found["running"]:
        say(f"Kubernetes lab: {found['detail']}, kubeconfig {found['kubeconfig']}")
    return found
