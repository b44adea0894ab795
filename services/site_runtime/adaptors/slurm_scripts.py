"""Stage scripts of a staged Slurm Attempt (seed 000; seed 001 diagnostic script version 1).

The three scripts are constant bash text: no user value is ever interpolated
into shell source.  Every value (repository URL, commit, branch, argv, the
Git credentials of a staging job) reaches the job through its environment,
which the Runtime sets in the submission.  Each script:

* runs with ``umask 077`` and writes a fixed stage/exit summary to the
  Attempt-scoped log (the job's standard output);
* removes its Git credential helper on exit and keeps the original exit status
  through that cleanup;
* stops with a recognisable exit status that the Runtime maps to a failure code
  (:data:`EXIT_CODES`).

stage-in creates the private workspace, clones the repository, checks out the
exact saved commit on an attached branch and runs ``git lfs pull``; compute
runs the saved commands (exact argv, or an explicit ``/bin/sh -c`` script);
stage-out commits any changes, pushes ``HEAD`` (and LFS objects) to the output
branch and prints the pushed commit.
"""

from __future__ import annotations

SCRIPT_VERSION = 1

EXIT_WORKSPACE = 70
EXIT_REPOSITORY_TRANSFER = 75
EXIT_COMMIT_MISSING = 86
EXIT_PUSH = 87

# (stage, exit status) -> failure code reported in the observation.
EXIT_CODES = {
    ("stage-in", EXIT_WORKSPACE): "workspace-unavailable",
    ("stage-in", EXIT_REPOSITORY_TRANSFER): "repository-transfer-failed",
    ("stage-in", EXIT_COMMIT_MISSING): "repository-commit-missing",
    ("compute", EXIT_WORKSPACE): "workspace-unavailable",
    ("stage-out", EXIT_WORKSPACE): "workspace-unavailable",
    ("stage-out", EXIT_PUSH): "repository-push-failed",
    ("stage-out", EXIT_REPOSITORY_TRANSFER): "repository-transfer-failed",
}

OUTPUT_COMMIT_MARK = "metallo-output-commit="

_PRELUDE = r"""#!/bin/bash
# Metallo staged Slurm Attempt, script version 1. Values come only from the environment.
set -uo pipefail
umask 077
ws="$METALLO_WORKSPACE"
askpass=""
say() { printf '%s metallo %s: %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$METALLO_STAGE" "$*"; }
finish() {
  local status=$?
  trap - EXIT
  if [ -n "$askpass" ]; then rm -f -- "$askpass"; fi
  say "exit status $status"
  exit "$status"
}
trap finish EXIT
# Slurm sends TERM on scancel and at the time limit: say so, and end with 143
# (without this trap the log said "exit status 0" for a cancelled stage).
trap 'say "stopped by SIGTERM (cancelled, or the time limit)"; exit 143' TERM
say "start (job ${SLURM_JOB_ID:-?})"
make_askpass() {
  # A constant helper that answers Git from the job's own environment.
  askpass="$ws/.metallo-askpass-$METALLO_STAGE"
  rm -f -- "$askpass"
  printf '%s\n' '#!/bin/sh' \
    'case "$1" in' \
    '  Username*) printf "%s\n" "$METALLO_GIT_USERNAME" ;;' \
    '  *) printf "%s\n" "$METALLO_GIT_PASSWORD" ;;' \
    'esac' >"$askpass" || exit 70
  chmod 0700 -- "$askpass" || exit 70
  export GIT_ASKPASS="$askpass" GIT_TERMINAL_PROMPT=0
  if [ -n "${METALLO_REPOSITORY_CA:-}" ]; then
    # That CA only: an empty CA directory instead of the system's (~300 certificates
    # read per fetch by Debian's GnuTLS git, about 70 ms of CPU).
    mkdir -p -m 0700 -- "$ws/.metallo-ca-path" || exit 70
    export GIT_SSL_CAINFO="$METALLO_REPOSITORY_CA" GIT_SSL_CAPATH="$ws/.metallo-ca-path"
  fi
}
"""

STAGE_IN = (
    _PRELUDE
    + r"""
if [ -e "$ws" ] || [ -L "$ws" ]; then
  if [ -L "$ws" ] || [ ! -d "$ws" ] || [ ! -O "$ws" ]; then say "workspace is not ours"; exit 70; fi
  rm -rf -- "$ws/repo" || exit 70
else
  mkdir -m 0700 -- "$ws" || exit 70
fi
make_askpass
git clone --quiet --no-checkout -- "$METALLO_REPOSITORY_URL" "$ws/repo" || { say "clone failed"; exit 75; }
cd -- "$ws/repo" || exit 70
if ! git cat-file -e "${METALLO_COMMIT}^{commit}" 2>/dev/null; then
  git fetch --quiet origin "$METALLO_COMMIT" 2>/dev/null || true
  if ! git cat-file -e "${METALLO_COMMIT}^{commit}" 2>/dev/null; then
    say "the saved commit is not in the repository"
    exit 86
  fi
fi
git checkout --quiet -B "$METALLO_BRANCH" "$METALLO_COMMIT" -- || exit 75
if command -v git-lfs >/dev/null 2>&1; then
  git lfs install --local >/dev/null || exit 75
  git lfs pull || { say "git lfs pull failed"; exit 75; }
fi
say "checked out $(git rev-parse HEAD)"
exit 0
"""
)

COMPUTE = (
    _PRELUDE
    + r"""
cd -- "$ws/repo" 2>/dev/null || { say "no checkout"; exit 70; }
cd -- "$METALLO_WORKDIR" 2>/dev/null || { say "no working directory"; exit 70; }
status=0
for ((i = 0; i < METALLO_CMD_COUNT; i++)); do
  shell_var="METALLO_CMD_${i}_SHELL"
  if [ -n "${!shell_var+set}" ]; then
    /bin/sh -c "${!shell_var}"
    status=$?
  else
    argc_var="METALLO_CMD_${i}_ARGC"
    argv=()
    for ((j = 0; j < ${!argc_var}; j++)); do
      arg_var="METALLO_CMD_${i}_ARG_${j}"
      argv+=("${!arg_var}")
    done
    "${argv[@]}"
    status=$?
  fi
  if [ "$status" != 0 ]; then say "command $i exited with $status"; exit "$status"; fi
done
exit 0
"""
)

STAGE_OUT = (
    _PRELUDE
    + r"""
cd -- "$ws/repo" 2>/dev/null || { say "no checkout"; exit 70; }
make_askpass
git add --all || exit 87
if ! git diff --cached --quiet; then
  GIT_AUTHOR_NAME=Metallo GIT_AUTHOR_EMAIL=metallo@localhost \
  GIT_COMMITTER_NAME=Metallo GIT_COMMITTER_EMAIL=metallo@localhost \
    git commit --quiet --no-verify -m "$METALLO_COMMIT_MESSAGE" || exit 87
fi
git push --quiet origin "HEAD:refs/heads/$METALLO_OUTPUT_BRANCH" || { say "push failed"; exit 87; }
printf 'metallo-output-commit=%s\n' "$(git rev-parse HEAD)"
exit 0
"""
)

SCRIPTS = {"stage-in": STAGE_IN, "compute": COMPUTE, "stage-out": STAGE_OUT}
