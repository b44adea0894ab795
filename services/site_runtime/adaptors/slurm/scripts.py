"""Stage scripts of a staged Slurm Attempt (docs/site-runtime.md, Stage script versions).

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

Scripts are versioned. An Attempt records the version it was prepared with, and every
later stage of it — stage-out may be submitted hours later, by a restarted Runtime — is
rendered from that version's text, byte for byte (docs/site-runtime.md, Recovery). A change to a
script is therefore a new version beside the old ones, never an edit of an old one:

* version 1 — the first scripts;
* version 2 — stage-out tries a failed push again after 2, 5, 10, 20 and 40 s unless
  git refused it for good (a rejected update, 403, failed authentication), pushes
  nothing when nothing changed and pushes a commit compute made itself, as the local
  executor does; stage-in runs ``git lfs pull`` only when a checked-out file is under
  the LFS filter (``git lfs pull`` starts a dozen git processes even with nothing to
  fetch); the exit summary starts on a line of its own;
* version 3 — stage-out: when git refuses the push because the branch moved on (another
  Run of the branch pushed first: ``[rejected]`` with ``fetch first`` or
  ``non-fast-forward``, or the server's ref lock saw another value, ``[remote
  rejected]`` … ``cannot lock ref``), waits a random 0.2-2 s, fetches
  the output branch, puts this Run's own commits (after the input commit, merges kept)
  on top of it and pushes again, at most 10 times; a rebase conflict, a rewritten
  branch (no longer holding the input commit) or the rounds running out push nothing
  (exit 87); a branch already holding exactly these changes reports no output commit.
  Without it, of ten Runs of one branch at once nine would lose their outputs.
  Stage-in, compute and the prelude are version 2's.
* version 4 — compute runs each command as a Slurm job step (``srun``), so a command
  killed by a signal is recorded as that signal in the step record (Slurm's derived
  exit code: SIGKILL → signal 9) instead of bash's ``exit 128+N``, while a command's
  own ``exit 137`` stays exit code 137. The rest is version 3's.
* version 5 — compute: a step's output no longer passes through Slurm's I/O
  forwarding, which dropped the last lines of a step killed by a signal (about one
  step in two on the lab): when the job's log is a regular file, the job reopens it
  for appending and each step's command appends to it itself; and the log names a
  death by a signal ("command 0 was killed by signal 9 (SIGKILL)") instead of
  "exited with 137", telling it from a command's own ``exit 137`` by what ``srun``
  said of the task. The rest is version 4's.
"""

from __future__ import annotations

from site_runtime.adaptors.slurm.compute_scripts import COMPUTE_V1, COMPUTE_V4, COMPUTE_V5
from site_runtime.domain.slurm_stages import (  # noqa: F401 - the scripts' exit statuses
    EXIT_CODES,
    EXIT_COMMIT_MISSING,
    EXIT_PUSH,
    EXIT_REPOSITORY_TRANSFER,
    EXIT_WORKSPACE,
)

OUTPUT_COMMIT_MARK = "metallo-output-commit="

_PRELUDE_HEAD = """#!/bin/bash
# Metallo staged Slurm Attempt, script version {version}. Values come only from the environment.
"""
_PRELUDE = r"""set -uo pipefail
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

_STAGE_IN_V1 = r"""if [ -e "$ws" ] || [ -L "$ws" ]; then
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
# Version 2's stage-in is version 1's with the LFS pull made conditional (derived, so
# the rest stays one text; both are pinned by hash in the tests).
_LFS_PULL_V1 = """  git lfs install --local >/dev/null || exit 75
  git lfs pull || { say "git lfs pull failed"; exit 75; }
"""
_LFS_PULL_V2 = """  # The filters and the pre-push hook always (compute may add files under an LFS
  # pattern); the pull only when a checked-out file is under the LFS filter.
  git lfs install --local >/dev/null || exit 75
  if [ -n "$(git ls-files -- ':(attr:filter=lfs)' | head -c 1)" ]; then
    git lfs pull || { say "git lfs pull failed"; exit 75; }
  fi
"""
assert _STAGE_IN_V1.count(_LFS_PULL_V1) == 1
_STAGE_IN_V2 = _STAGE_IN_V1.replace(_LFS_PULL_V1, _LFS_PULL_V2)
_STAGE_OUT_V1 = r"""cd -- "$ws/repo" 2>/dev/null || { say "no checkout"; exit 70; }
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
_STAGE_OUT_V2 = r"""cd -- "$ws/repo" 2>/dev/null || { say "no checkout"; exit 70; }
make_askpass
git add --all || exit 87
if git diff --cached --quiet; then
  # Nothing changed (and compute made no commit of its own): pushing the input commit
  # again would only fail (non-fast-forward) when another Run moved the branch
  # meanwhile, as the local executor never does.
  if [ "$(git rev-parse HEAD)" = "$METALLO_COMMIT" ] &&
    [ "$(git symbolic-ref --quiet --short HEAD)" = "$METALLO_OUTPUT_BRANCH" ]; then
    say "no changes to commit; nothing pushed"
    exit 0
  fi
else
  GIT_AUTHOR_NAME=Metallo GIT_AUTHOR_EMAIL=metallo@localhost \
  GIT_COMMITTER_NAME=Metallo GIT_COMMITTER_EMAIL=metallo@localhost \
    git commit --quiet --no-verify -m "$METALLO_COMMIT_MESSAGE" || exit 87
fi
# A Git server that is briefly away must not throw away a finished compute's results:
# try again after each delay, unless git says the push was refused for good. The
# sleep runs in the background so that SIGTERM (scancel) ends the wait at once; the
# trap stops it too, and it holds none of the job's output files open.
pushed=""
# `jobs -p`: the sleep still running, if any (from the moment it is forked, which a
# variable set after the fork would miss; never a finished one's reused pid).
trap 'kill $(jobs -p) 2>/dev/null
say "stopped by SIGTERM (cancelled, or the time limit)"; exit 143' TERM
for delay in ${METALLO_PUSH_RETRY_SECONDS:-2 5 10 20 40} 0; do
  said="$(git push --quiet origin "HEAD:refs/heads/$METALLO_OUTPUT_BRANCH" 2>&1)"
  status=$?
  if [ -n "$said" ]; then printf '%s\n' "$said"; fi
  if [ "$status" = 0 ]; then pushed=1; break; fi
  case "$said" in
    *"[rejected]"* | *"[remote rejected]"* | *non-fast-forward* | *"returned error: 403"* | \
      *"Authentication failed"* | *"Permission denied"*)
      say "push refused"; exit 87 ;;
  esac
  case "$delay" in '' | 0 | *[!0-9]*) break ;; esac
  say "push failed (exit status $status); trying again in $delay s"
  sleep "$delay" </dev/null >/dev/null 2>&1 &
  wait "$!"
done
if [ -z "$pushed" ]; then say "push failed"; exit 87; fi
printf 'metallo-output-commit=%s\n' "$(git rev-parse HEAD)"
exit 0
"""


# Version 3's stage-out is version 2's with the push loop replaced (derived, so the rest
# stays one text; both are pinned by hash in the tests).
_PUSH_LOOP_V2 = _STAGE_OUT_V2[_STAGE_OUT_V2.index("# A Git server that is briefly away") :]
_PUSH_LOOP_V2 = _PUSH_LOOP_V2[: _PUSH_LOOP_V2.index("printf 'metallo-output-commit=")]
_PUSH_LOOP_V3 = r"""# A Git server that is briefly away must not throw away a finished compute's results:
# try again after each delay, unless git says the push was refused for good. The
# sleep runs in the background so that SIGTERM (scancel) ends the wait at once; the
# trap stops it too, and it holds none of the job's output files open.
# When git refuses the push because the branch moved on (another Run of the branch
# pushed first; or, on the server, between its advertisement and its ref update),
# fetch the branch, put this Run's own commits (those after the input commit,
# METALLO_COMMIT; merges kept) on top of it and push again: at most 10 rounds, each
# after a random pause of 0.2-2 s so that Runs racing for the branch fall out of step.
# A branch that no longer holds the input commit was rewritten: rebasing onto it would
# bring removed history back, so nothing is pushed. The rebase does not smudge LFS
# files (the other Run's objects are not needed here); this Run's LFS objects are the
# same after it, and the pre-push hook sends them.
pushed=""
rebased=0
tracking="refs/remotes/origin/$METALLO_OUTPUT_BRANCH"
delays=(${METALLO_PUSH_RETRY_SECONDS:-2 5 10 20 40} 0)
tried=0
# `jobs -p`: the sleep still running, if any (from the moment it is forked, which a
# variable set after the fork would miss; never a finished one's reused pid).
trap 'kill $(jobs -p) 2>/dev/null
say "stopped by SIGTERM (cancelled, or the time limit)"; exit 143' TERM
while :; do
  said="$(git push --quiet origin "HEAD:refs/heads/$METALLO_OUTPUT_BRANCH" 2>&1)"
  status=$?
  if [ -n "$said" ]; then printf '%s\n' "$said"; fi
  if [ "$status" = 0 ]; then pushed=1; break; fi
  case "$said" in
    *"[rejected]"*"fetch first"* | *"[rejected]"*non-fast-forward* | \
      *"cannot lock ref"*"[remote rejected]"* | *"[remote rejected]"*"cannot lock ref"*)
      if [ "$rebased" -ge 10 ]; then
        say "the branch moved on again after 10 rebases; nothing pushed"; exit 87
      fi
      say "the branch moved on (another Run pushed first): rebasing onto it" \
        "(round $((rebased + 1)) of 10)"
      pause=$((RANDOM % 19 + 2))
      sleep "$((pause / 10)).$((pause % 10))" </dev/null >/dev/null 2>&1 &
      wait "$!"
      said="$(git fetch --quiet --no-tags origin \
        "+refs/heads/$METALLO_OUTPUT_BRANCH:$tracking" 2>&1)"
      status=$?
      if [ -n "$said" ]; then printf '%s\n' "$said"; fi
      if [ "$status" = 0 ]; then
        rebased=$((rebased + 1))
        git merge-base --is-ancestor "$METALLO_COMMIT" "$tracking"
        holds=$?
        if [ "$holds" = 1 ]; then
          say "the branch $METALLO_OUTPUT_BRANCH was rewritten (it no longer holds the" \
            "input commit); nothing pushed"
          exit 87
        elif [ "$holds" != 0 ]; then
          say "checking the branch $METALLO_OUTPUT_BRANCH failed (exit status $holds);" \
            "nothing pushed"
          exit 87
        fi
        said="$(GIT_AUTHOR_NAME=Metallo GIT_AUTHOR_EMAIL=metallo@localhost \
          GIT_COMMITTER_NAME=Metallo GIT_COMMITTER_EMAIL=metallo@localhost \
          GIT_LFS_SKIP_SMUDGE=1 git rebase --quiet --no-verify --rebase-merges \
          --onto "$tracking" "$METALLO_COMMIT" 2>&1)"
        status=$?
        if [ -n "$said" ]; then printf '%s\n' "$said" | grep -v '^hint:'; fi
        if [ "$status" = 0 ] && [ "$(git rev-list --count "$tracking..HEAD")" = 0 ]; then
          # Everything this Run changed is on the branch already (the same outputs):
          # nothing of its own to push, and no other Run's commit named as its output.
          say "the branch $METALLO_OUTPUT_BRANCH already holds these outputs; nothing pushed"
          exit 0
        fi
        if [ "$status" = 0 ]; then continue; fi
        conflicted="$(git ls-files --unmerged | head -c 1)"
        git rebase --abort >/dev/null 2>&1
        if [ -n "$conflicted" ]; then
          say "the outputs conflict with what another Run pushed to" \
            "$METALLO_OUTPUT_BRANCH first; nothing pushed"
        else
          say "rebasing onto $METALLO_OUTPUT_BRANCH failed (exit status $status); nothing pushed"
        fi
        exit 87
      fi
      say "fetching $METALLO_OUTPUT_BRANCH failed (exit status $status)" ;;
  esac
  case "$said" in
    *"[rejected]"* | *"[remote rejected]"* | *non-fast-forward* | *"returned error: 403"* | \
      *"Authentication failed"* | *"Permission denied"*)
      say "push refused"; exit 87 ;;
  esac
  delay="${delays[tried]:-}"
  tried=$((tried + 1))
  case "$delay" in '' | 0 | *[!0-9]*) break ;; esac
  say "push failed (exit status $status); trying again in $delay s"
  sleep "$delay" </dev/null >/dev/null 2>&1 &
  wait "$!"
done
if [ -z "$pushed" ]; then say "push failed"; exit 87; fi
"""
assert _STAGE_OUT_V2.count(_PUSH_LOOP_V2) == 1
_STAGE_OUT_V3 = _STAGE_OUT_V2.replace(_PUSH_LOOP_V2, _PUSH_LOOP_V3)

#: Version 2's exit summary starts on a line of its own: a command whose output did not
#: end with a newline left "…last words2026-11-30T… metallo compute: exit status 0".
#: Only when the log is a regular file (reading a pipe would take its bytes).
_ON_A_NEW_LINE = r"""  if [ -f "/proc/$$/fd/1" ] && [ -n "$(tail -c 1 "/proc/$$/fd/1" 2>/dev/null)" ]; then
    printf '\n'
  fi
"""
_ASKPASS_CLEANUP = '  if [ -n "$askpass" ]; then rm -f -- "$askpass"; fi\n'
assert _ASKPASS_CLEANUP in _PRELUDE
_PRELUDE_V2 = _PRELUDE.replace(_ASKPASS_CLEANUP, _ASKPASS_CLEANUP + _ON_A_NEW_LINE)


def _scripts(
    version: int, stage_in: str, stage_out: str, prelude: str, compute: str = COMPUTE_V1
) -> dict[str, str]:
    head = _PRELUDE_HEAD.format(version=version) + prelude + "\n"
    return {"stage-in": head + stage_in, "compute": head + compute, "stage-out": head + stage_out}


#: version -> stage -> the exact script text. Never edit an existing version's text.
SCRIPTS_BY_VERSION: dict[int, dict[str, str]] = {
    1: _scripts(1, _STAGE_IN_V1, _STAGE_OUT_V1, _PRELUDE),
    2: _scripts(2, _STAGE_IN_V2, _STAGE_OUT_V2, _PRELUDE_V2),
    3: _scripts(3, _STAGE_IN_V2, _STAGE_OUT_V3, _PRELUDE_V2),
    4: _scripts(4, _STAGE_IN_V2, _STAGE_OUT_V3, _PRELUDE_V2, COMPUTE_V4),
    5: _scripts(5, _STAGE_IN_V2, _STAGE_OUT_V3, _PRELUDE_V2, COMPUTE_V5),
}
#: The version a new Attempt is prepared with.
SCRIPT_VERSION = 5
SCRIPTS = SCRIPTS_BY_VERSION[SCRIPT_VERSION]


class UnknownScriptVersion(ValueError):
    """An Attempt record names a script version this Runtime does not have (a newer
    Runtime prepared it): its stages cannot be rendered byte for byte, so the Attempt
    waits for that Runtime instead of running a different script."""


def scripts_for(version: int) -> dict[str, str]:
    """The three scripts (stage → bash text) of script ``version`` as recorded with an
    Attempt (docs/site-runtime.md, Recovery: every stage re-rendered byte for byte).

    Raises :class:`UnknownScriptVersion` for a version this Runtime does not know.
    """
    try:
        return SCRIPTS_BY_VERSION[version]
    except (KeyError, TypeError):
        raise UnknownScriptVersion(
            f"the Attempt was prepared with stage script version {version!r}; this Runtime "
            f"knows versions {sorted(SCRIPTS_BY_VERSION)} — run the Runtime that prepared it"
        ) from None
