"""Exit codes of ``metallo`` and the error every failing command ends with.

| code | meaning |
| --- | --- |
| 0 | succeeded (or the read found what was asked) |
| 1 | the Run or Pipeline failed or was cancelled |
| 2 | usage or validation error: the request was refused and nothing changed |
| 3 | not found (Run, Pipeline, repository, branch, action, grant) |
| 4 | outcome uncertain: no answer in time, or the platform could not be reached |

Every :class:`CliError` carries a ``hint``: what to do next. With ``--output json``
it is also printed as :func:`error_document` (``{"error": {code, message, hint,
exit_code}}``).
"""

from __future__ import annotations

from enum import IntEnum


class Exit(IntEnum):
    """The documented exit codes (module table)."""

    OK = 0
    FAILED = 1
    USAGE = 2
    NOT_FOUND = 3
    UNCERTAIN = 4


class CliError(Exception):
    """A failure to report: ``message`` (what happened), ``hint`` (what to do next),
    ``code`` (a stable rejection or local code) and the process exit code."""

    def __init__(self, message: str, hint: str, exit_code: Exit = Exit.USAGE, code: str = ""):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code
        self.code = code


# The stable code of an error raised without one (JSON errors always carry a code).
FALLBACK_CODES = {Exit.OK: "ok", Exit.FAILED: "failed", Exit.USAGE: "invalid-argument",
                  Exit.NOT_FOUND: "not-found", Exit.UNCERTAIN: "outcome-uncertain"}


def error_document(error: CliError) -> dict[str, dict[str, str | int]]:
    """The JSON shape of a failure for scripts (docs/quickstart.md):
    ``{"error": {"code": str, "message": str, "hint": str, "exit_code": int}}``; ``code``
    is the error's own or, when it has none, the fallback for its exit code."""
    return {"error": {"code": error.code or FALLBACK_CODES[error.exit_code],
                      "message": error.message, "hint": error.hint,
                      "exit_code": int(error.exit_code)}}


# Rejection codes that mean "there is no such thing" (exit 3).
NOT_FOUND_CODES = frozenset({
    "not-found", "repository-not-found", "branch-not-found", "commit-not-found",
    "file-not-found", "action-not-found", "run-not-found", "pipeline-not-found",
    "workload-not-found", "grant-not-found", "site-not-found",
})

# What to do next for well-known rejection codes (seed words; docs of each service).
HINTS = {
    "attempt-not-at-site": "the Attempt has not reached its Site yet: read its logs once it is "
                           "queued (`metallo run logs RUN --follow` waits for that)",
    "permission-denied": "check --member/--project (METALLO_MEMBER, METALLO_PROJECT); a Project "
                         "maintainer grants capabilities in the governance file (operator "
                         "commands need an operator capability: docs/governance.md, Operators)",
    "site-not-found": "use a Site id listed in the governance file (or add the Site first)",
    "environment-mismatch": "use the Site's own environment (named in the message)",
    "invalid-duration": "give a lifetime such as 45s, 90m, 12h or 30d (at most 400d)",
    "governance-unavailable": "the governance file is invalid or unreadable; an operator must fix "
                              "it (see docs/governance.md), then retry",
    "invalid-argument": "correct the argument named in the message and run the command again",
    "actions-invalid": "fix actions.yaml (check it locally with `python -m workload_portfolio "
                       "check actions.yaml`), push, and run again",
    "idempotency-conflict": "this --command-id was already used for a different request; "
                            "leave --command-id out to send a new command",
    "source-unavailable": "the Git server could not be reached or refused the connection "
                          "(check the repository URL, the network and the server's TLS "
                          "certificate — METALLO_GIT_CA_FILE), then run the command again",
    "repository-not-found": "check the repository URL (and that the platform may read it)",
    "branch-not-found": "check --branch; `git ls-remote REPO` lists the branches",
    "commit-not-found": "check the commit; it must be pushed to the repository",
    "file-not-found": "add actions.yaml at the repository root (docs/actions.md) and push",
    "action-not-found": "check the action name; `python -m workload_portfolio check actions.yaml` "
                        "lists the actions",
    "not-found": "check the id and --project; `metallo run list` / `metallo pipeline list` show "
                 "what exists",
    "launch-key-conflict": "this launch key names another Workload revision; use another key",
    "pipeline-not-ended": "wait for it (`metallo pipeline show PIPELINE --wait`) or stop it "
                          "(`metallo pipeline stop PIPELINE`), then rerun",
    "nothing-to-rerun": "every step succeeded; leave out --failed to run every step again",
    "needs-not-selected": "add the actions named in the message to --action, or leave --action out",
}


# Exit-4 codes meaning "the owner did not answer or is not running": a wait that
# meets one says how to resume waiting instead of "run this again".
NO_ANSWER_CODES = frozenset({"outcome-uncertain", "service-not-running", "service-unavailable"})


def no_answer_hint(then: str) -> str:
    """What to do after a request got no answer (exit 4): the owner service may not be
    running — the dev stack may have stopped — so check that first, then ``then``
    (e.g. "run the same read again")."""
    return ("the service may not be running (did the dev stack stop?): check `metallo dev "
            f"status` and start it with `metallo dev up` if needed, then {then}")


def rejection_exit(code: str) -> Exit:
    """Exit code for a definite rejection with ``code``: 3 when it means not-found, else 2."""
    return Exit.NOT_FOUND if code in NOT_FOUND_CODES else Exit.USAGE


def rejection_hint(code: str) -> str:
    """What to do after a rejection with ``code`` (a generic hint for unknown codes)."""
    return HINTS.get(code, "read the message above, correct the request and run it again; "
                           "the code is documented in docs/runs.md and docs/actions.md")
