"""Builds the Go contract check (contracts/go/build: Debian's Go toolchain, GOPATH
mode, code generated from contracts/proto) for the tests that run it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_go_client(work: Path) -> Path:
    """Build into the GOPATH ``work``; the binary's path. Fails the test (with the
    build's own message) when the toolchain or a Debian Go package is missing."""
    done = subprocess.run([str(ROOT / "contracts" / "go" / "build"), str(work)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"contracts/go/build failed:\n{done.stderr[-4000:]}"
    binary = Path(done.stdout.strip().splitlines()[-1])
    assert binary.is_file(), done.stdout
    return binary
