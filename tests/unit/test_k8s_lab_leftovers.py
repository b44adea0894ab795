"""A killed Kubernetes lab leaves container processes behind; the next one kills them,
and only them (a pid whose start time differs is another process)."""

from __future__ import annotations

import subprocess
import time

from metallo.labs.kubernetes.containers import forget, kill_leftovers, remember


def test_leftover_process_groups_are_killed_by_pid_and_start_time(tmp_path):
    registry = tmp_path / "containers"
    mine = subprocess.Popen(["sleep", "60"], start_new_session=True)
    other = subprocess.Popen(["sleep", "60"], start_new_session=True)
    done = subprocess.Popen(["true"], start_new_session=True)
    try:
        remember(registry, mine.pid)
        remember(registry, done.pid)
        done.wait()
        forget(registry, done.pid)
        remember(registry, other.pid)
        (registry / str(other.pid)).write_text("1")  # a recorded start time that is not this process's
        assert kill_leftovers(registry) == 1
        assert mine.wait(timeout=10) == -9
        time.sleep(0.2)
        assert other.poll() is None
        assert list(registry.iterdir()) == []
    finally:
        for p in (mine, other):
            if p.poll() is None:
                p.kill()
                p.wait()
