"""The committed generated protobuf code matches contracts/proto."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def generated_files(base: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(base)): p.read_bytes()
        for p in (base / "metallo").rglob("*_pb2.py*")
    }


def test_generated_code_has_no_drift(tmp_path):
    subprocess.run([str(ROOT / "scripts" / "gen-proto"), str(tmp_path)], check=True, cwd=ROOT)
    fresh = generated_files(tmp_path)
    committed = generated_files(ROOT / "libs")
    assert fresh, "scripts/gen-proto generated nothing"
    missing = sorted(set(fresh) - set(committed))
    stale = sorted(set(committed) - set(fresh))
    changed = sorted(name for name in fresh if name in committed and fresh[name] != committed[name])
    assert not (missing or stale or changed), (
        f"generated code drifted from contracts/proto — run scripts/gen-proto. "
        f"missing={missing} stale={stale} changed={changed}"
    )
