"""scripts/lib/common.sh, run by a real bash: pip's output is shown only when the
install fails, and messages are coloured only for a terminal without NO_COLOR;
scripts/test always asks pytest for the slowest tests (README, Quick start)."""

from __future__ import annotations

import os
import pty
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMMON = ROOT / "scripts" / "lib" / "common.sh"
ESC = "\x1b["

# Stands in for .venv/bin/python: `python -m pip install …` prints what a machine's pip
# configuration prints, then succeeds or fails as PIP_OUTCOME says; it records its
# arguments so the test sees what was installed.
FAKE_PYTHON = """#!/usr/bin/env bash
if [ "$1" = -c ]; then  # ensure_venv's import check: as IMPORTS says (a real .venv: after its install)
  echo "$2" >> "$(dirname "$0")/../checks"
  case "${IMPORTS:-after-install}" in
    ok) exit 0 ;;
    never) exit 1 ;;
    *) [ -f "$(dirname "$0")/../calls" ] && grep -q -- "-e " "$(dirname "$0")/../calls" ;;
  esac
  exit $?
fi
echo "$*" >> "$(dirname "$0")/../calls"
for i in 1 2 3; do
  echo "WARNING: Location 'file:///opt/pypi/simple/pkg$i/' is ignored: it is neither a file nor a directory." >&2
done
if [ "${PIP_OUTCOME:-ok}" = fail ]; then
  echo "ERROR: Could not find a version that satisfies the requirement faststream" >&2
  exit 1
fi
echo "Successfully installed metallo"
"""


def fake_venv(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return venv


def bash(script: str, *, env: dict[str, str] | None = None, stderr=subprocess.PIPE,
         cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``script`` after sourcing common.sh, in a real bash."""
    full_env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    full_env.update(env or {})
    return subprocess.run(["bash", "-c", f'source "{COMMON}"\n{script}'], env=full_env,
                          stdout=subprocess.PIPE, stderr=stderr, text=True, timeout=60,
                          check=False, cwd=cwd)


def ensure_venv_with(venv: Path, outcome: str, imports: str = "after-install") -> subprocess.CompletedProcess:
    """ensure_venv with the fake interpreter; pip's output is captured under ``tmp``."""
    tmp = venv.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    return bash(f'VENV="{venv}"; PY="$VENV/bin/python"; ensure_venv; echo reached-the-end',
                env={"PIP_OUTCOME": outcome, "TMPDIR": str(tmp), "IMPORTS": imports})


def test_a_successful_install_says_one_line_and_hides_pips_warnings(tmp_path):
    venv = fake_venv(tmp_path)
    done = ensure_venv_with(venv, "ok")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "reached-the-end\n"
    assert "WARNING" not in done.stderr and "Successfully installed" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # the one progress note
    assert done.stderr.startswith("[metallo] installing Metallo")
    calls = (venv / "calls").read_text().splitlines()
    assert calls == ["-m pip install -q --upgrade pip", f"-m pip install -q -e {ROOT}[dev]"]
    assert list((tmp_path / "tmp").iterdir()) == []
    assert (venv / ".metallo-installed").is_file()  # the next run installs nothing
    again = ensure_venv_with(venv, "ok")
    assert again.returncode == 0 and again.stderr == ""
    assert len((venv / "calls").read_text().splitlines()) == 2


def test_an_incomplete_venv_with_a_current_stamp_is_installed_again(tmp_path):
    venv = fake_venv(tmp_path)
    (venv / ".metallo-installed").write_text(
        subprocess.run(["sha256sum", str(ROOT / "pyproject.toml")], capture_output=True, text=True,
                       check=True).stdout.split()[0] + "\n")
    done = ensure_venv_with(venv, "ok")  # the import check fails until pip installed the project
    assert done.returncode == 0, done.stderr
    assert "is incomplete (its Python cannot run: import ruamel.yaml, metallo): installing again" in done.stderr
    assert (venv / "calls").read_text().splitlines()[-1] == f"-m pip install -q -e {ROOT}[dev]"
    assert (venv / "checks").read_text().splitlines() == ["import ruamel.yaml, metallo"] * 2


def test_an_install_that_still_cannot_import_says_what_to_do(tmp_path):
    venv = fake_venv(tmp_path)
    done = ensure_venv_with(venv, "ok", imports="never")
    assert done.returncode == 1 and "reached-the-end" not in done.stdout
    assert f"remove {venv} and run this again" in done.stderr
    assert not (venv / ".metallo-installed").exists()


def test_the_labs_ensure_the_venv_before_reading_the_governance_file():
    for lab in ("slurm-lab", "k8s-lab"):
        text = (ROOT / "scripts" / lab).read_text()
        up = text[text.index("cmd_up() {"):]
        up = up[:up.index("\n}\n")]
        assert "ensure_venv" in up and up.index("ensure_venv") < up.index("ensure_members"), lab


def test_a_failed_install_shows_pips_whole_output_and_stops(tmp_path):
    venv = fake_venv(tmp_path)
    done = ensure_venv_with(venv, "fail")
    assert done.returncode == 1
    assert "reached-the-end" not in done.stdout
    assert done.stderr.count("WARNING: Location") == 3  # pip's own words, all of them
    assert "Could not find a version that satisfies the requirement faststream" in done.stderr
    assert done.stderr.rstrip().endswith("(pip's output above)")
    assert not (venv / ".metallo-installed").exists()  # tried again next time
    assert list((tmp_path / "tmp").iterdir()) == []  # the captured output is removed


def test_messages_to_a_file_or_pipe_have_no_colour_codes(tmp_path):
    target = tmp_path / "stderr.txt"
    with target.open("w") as stderr:
        done = bash('log "stage 1/6"; die "it broke"', stderr=stderr)
    assert done.returncode == 1
    assert target.read_text() == "[metallo] stage 1/6\n[metallo] error: it broke\n"
    piped = bash('log "hello"')
    assert piped.stderr == "[metallo] hello\n"


def on_a_terminal(script: str, env: dict[str, str] | None = None) -> str:
    """What ``script`` writes to stderr when stderr is a terminal (a pseudo-terminal)."""
    leader, follower = pty.openpty()
    try:
        done = bash(script, env=env, stderr=follower)
        os.close(follower)
        follower = -1
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # the terminal's other side is closed: all was read
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert done.returncode == 0
        return b"".join(chunks).decode()
    finally:
        if follower != -1:
            os.close(follower)
        os.close(leader)


def test_a_terminal_gets_colour_unless_no_color_is_set():
    coloured = on_a_terminal('log "hello"')
    assert coloured.startswith(f"{ESC}1m[metallo]{ESC}0m hello")
    plain = on_a_terminal('log "hello"', env={"NO_COLOR": "1"})
    assert ESC not in plain and plain.startswith("[metallo] hello")
    empty = on_a_terminal('log "hello"', env={"NO_COLOR": ""})  # set, even empty: no colour
    assert ESC not in empty


def test_the_demos_usage_error_is_plain_text_when_redirected():
    done = subprocess.run([str(ROOT / "scripts" / "demo"), "--executor", "nowhere"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2
    assert ESC not in done.stderr
    assert done.stderr.startswith("[metallo] error: --executor must be local or slurm")
    helped = subprocess.run([str(ROOT / "scripts" / "demo"), "--help"], capture_output=True,
                            text=True, timeout=60, check=False)
    assert helped.returncode == 0
    assert helped.stdout.startswith("The Metallo demo (docs/quickstart.md): from a fresh clone")
    assert "issue" not in helped.stdout


def test_scripts_test_asks_pytest_for_the_15_slowest_tests(tmp_path):
    # A copy of scripts/test in a checkout whose .venv is installed (its stamp matches
    # pyproject.toml) and whose python records how pytest was called; without
    # scripts/slurm-lab there, no lab is started. PostgreSQL and RabbitMQ answer.
    import hashlib
    import shutil

    checkout = tmp_path / "checkout"
    (checkout / "scripts" / "lib").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "test", checkout / "scripts" / "test")
    shutil.copy(COMMON, checkout / "scripts" / "lib" / "common.sh")
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    venv = checkout / ".venv"
    (venv / "bin").mkdir(parents=True)
    (venv / ".metallo-installed").write_text(
        hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest() + "\n")
    python = venv / "bin" / "python"
    python.write_text('#!/usr/bin/env bash\n'
                      'if [ "$1" = -c ]; then exit 0; fi\n'  # ensure_venv's import check: installed
                      'if [ "$1 $2" = "-m pytest" ]; then echo "$*" > "$(dirname "$0")/../pytest-args"; exit 0; fi\n'
                      'exec python3 "$@"\n')
    python.chmod(0o755)
    done = subprocess.run([str(checkout / "scripts" / "test"), "tests/unit", "-x"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert (checkout / ".venv" / "pytest-args").read_text() == "-m pytest --durations=15 tests/unit -x\n"
