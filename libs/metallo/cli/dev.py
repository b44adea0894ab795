"""``metallo dev up|down|status|publish``: the development stack (``metallo.devstack``)."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from metallo.cli import options as opt
from metallo.cli.exits import CliError, Exit, error_document
from metallo.cli.render import Output, err, out, print_error, print_json

app = typer.Typer(no_args_is_help=True, help="The development stack on this machine.")


def _say(message: str) -> None:
    """Progress of ``dev up``/``dev down`` on stderr. A reader that stopped reading
    (``metallo dev down 2>&1 | head -1``) must not cut the work short: stopping halfway
    would leave the grant unrevoked and the state file stale, so
    stderr then goes to /dev/null and the work goes on."""
    try:
        err.print(message, markup=False, highlight=False)
    except (BrokenPipeError, SystemExit):
        # Rich ends the process (SystemExit 1, Console.on_broken_pipe) when the reader
        # of its stream has gone; here the work must go on, silently.
        err.quiet = True
        _quiet(sys.stderr)


def _quiet(stream) -> None:
    """Point ``stream``'s file descriptor at /dev/null (later writes and the
    interpreter's final flush go nowhere instead of failing)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, stream.fileno())
    finally:
        os.close(devnull)


@app.command("up")
def up(executor: Annotated[str, typer.Option(
           help="auto (slurm when `scripts/slurm-lab status` succeeds), local or slurm")] = "auto",
       foreground: Annotated[bool, typer.Option(
           "--foreground", help="stay attached and show every component's log lines")] = False,
       edge_port: Annotated[int, typer.Option(min=1024, max=65535, help="Site edge port")] = 8443,
       fresh: Annotated[bool, typer.Option(
           "--fresh", help="drop the dev databases first (all dev Runs and Pipelines are lost)")] = False,
       replicas: Annotated[int, typer.Option(
           min=1, max=4, help="processes of each service (the Site Runtime runs once)")] = 1,
       output: opt.OutputOpt = Output.table) -> None:
    """Migrate, make certificates and a runtime grant, start the services (``--replicas``
    processes of each), the Site edge and one Site Runtime under a supervisor (state in
    var/dev)."""
    from metallo.devstack.control import StackError
    from metallo.devstack.control import up as stack_up

    try:
        state = stack_up(executor, foreground=foreground, edge_port=edge_port, fresh=fresh,
                         replicas=replicas, say=_say)
    except StackError as exc:
        if exc.usage:
            raise CliError(str(exc), exc.hint or "correct the options and run it again", Exit.USAGE,
                           code="invalid-argument") from None
        raise CliError(str(exc), exc.hint or (
            "fix the cause the message names (the component logs are in var/dev/logs; "
            "`metallo dev status` shows each component) and run `metallo dev up` again"),
            Exit.FAILED, code=exc.code or "stack-failed") from None
    if output is Output.json:
        print_json(state)
    elif not foreground:
        out.print(f"dev stack ready: edge {state.get('edge_url')}, executor "
                  f"{state.get('executor')}, logs {state.get('logs')}")


@app.command("down")
def down() -> None:
    """Stop the development stack and revoke its runtime grant."""
    from metallo.devstack.control import down as stack_down

    stack_down(say=_say)


@app.command("status")
def status(output: opt.OutputOpt = Output.table) -> None:
    """Say whether the stack runs, each component's state and readiness (``/readyz``)
    (exit 3 when not running)."""
    import asyncio

    from metallo.devstack.control import failed_components, left_stopped
    from metallo.devstack.control import status as stack_status
    from metallo.devstack.readiness import not_ready_reason, read_readiness

    state = stack_status()
    if state is None:
        stopped = CliError("the dev stack is not running", "start it with `metallo dev up`",
                           Exit.NOT_FOUND, code="stack-not-running")
        if output is not Output.json:
            raise stopped
        # One JSON document: the status scripts read, beside the error every failure carries.
        print_error(stopped)
        print_json({"status": "stopped", **error_document(stopped)})
        raise typer.Exit(int(stopped.exit_code))
    # A component the supervisor left stopped: the stack runs without it, which must
    # not read as "ready".
    failed = failed_components(state)
    readiness = asyncio.run(read_readiness(state))
    state = {**state, "components": {
        name: {**comp, **({"readiness": readiness[name]} if name in readiness else {})}
        for name, comp in state.get("components", {}).items()}}
    # A component that runs but whose /readyz says not ready (its database dropped, its
    # migrations behind): requests to it get no answer, which must not read as "ready" either.
    not_ready = {name: not_ready_reason(r) for name, r in readiness.items()
                 if not r["ready"] and name not in failed}
    degraded = None
    if failed or not_ready:
        state = {**state, "status": "degraded", "failed": failed, "not_ready": sorted(not_ready)}
        problems = ([f"{left_stopped(failed)}; Runs that need it wait meanwhile"] if failed else []) + [
            f"{name} is not ready ({why})" for name, why in sorted(not_ready.items())]
        degraded = CliError(
            "; ".join(problems),
            "read its log, then restart the stack: `metallo dev down`, then "
            "`metallo dev up` (`--fresh` recreates its databases)", Exit.FAILED, code="stack-degraded")
    if output is Output.json:
        # One document, with the error every failing command carries (as when stopped).
        print_json({**state, **error_document(degraded)} if degraded else state)
    else:
        out.print(f"dev stack {state['status']} (supervisor pid {state['pid']}, executor "
                  f"{state['executor']}, edge {state['edge_url']})")
        for name, comp in sorted(state.get("components", {}).items()):
            ready = comp.get("readiness")
            shown = ("" if ready is None else "  ready" if ready["ready"]
                     else f"  not ready ({not_ready_reason(ready)})")
            out.print(f"  {name:<24} {comp['state']:<10} pid {comp['pid']}  restarts "
                      f"{comp['restarts']}  {comp['log']}{shown}")
        for name in state.get("missing", []):
            out.print(f"  {name:<24} not in this checkout")
        if state.get("k8s_lab"):
            from metallo.devstack.k8s_lab import k8s_lab_status

            lab = k8s_lab_status()
            out.print(f"  {'kubernetes lab':<24} {'running' if lab['running'] else 'stopped':<10} "
                      f"{lab['detail']}  kubeconfig {lab['kubeconfig']}")
    if degraded is not None:
        if output is Output.json:
            print_error(degraded)
            raise typer.Exit(int(degraded.exit_code))
        raise degraded


def repository_name(directory: str, name: str | None) -> str:
    """The lab repository name to publish ``directory`` as: ``name``, or when None the
    directory's own name (``var/myrepo`` → ``myrepo``; ``.`` → the current directory's).

    Raises CliError exit 2 (``invalid-argument``) when the name does not match
    :data:`metallo.devstack.gitrepo.NAME_RULE`; the hint gives the rule.
    """
    from pathlib import Path

    from metallo.devstack.gitrepo import NAME_RULE, valid_name

    if name is not None:
        if not valid_name(name):
            raise CliError(f"--name {name!r} is not a valid repository name",
                           f"pass --name NAME with NAME {NAME_RULE}", Exit.USAGE,
                           code="invalid-argument")
        return name
    derived = Path(directory).resolve().name
    if not valid_name(derived):
        raise CliError(f"the directory's name {derived!r} is not a valid repository name",
                       f"pass --name NAME with NAME {NAME_RULE}", Exit.USAGE,
                       code="invalid-argument")
    return derived


@app.command("login")
def login(member: Annotated[str, typer.Argument(
        help="the member to log in as (a governance member with an oidc_subject)")] = "m-alice"
          ) -> None:
    """Log in at the dev stack's lab issuer as MEMBER, with the password `dev up` made
    (as `metallo login` does; the token is kept 0600 for later commands)."""
    import json

    from metallo.cli.credentials import credentials_path
    from metallo.cli.login import login_with_password
    from metallo.devstack.components import LAB_PASSWORDS_FILE
    from metallo.devstack.control import status as stack_status
    from metallo.devstack.layout import Layout

    state = stack_status()
    if state is None:
        raise CliError("the dev stack is not running", "start it with `metallo dev up`",
                       Exit.NOT_FOUND, code="stack-not-running")
    try:
        passwords = json.loads((Layout.default().secrets / LAB_PASSWORDS_FILE).read_text())
    except (OSError, ValueError):
        passwords = {}
    if member not in passwords:
        raise CliError(f"the lab issuer has no login for {member!r}",
                       "name a member of examples/governance.yaml that has an oidc_subject "
                       f"({', '.join(sorted(passwords)) or 'none yet: run `metallo dev up`'})",
                       Exit.USAGE, code="invalid-argument")
    got = login_with_password(f"{state['edge_url']}/lab-issuer", member, passwords[member],
                              ca_file=state.get("ca_file"), client_id="metallo-cli")
    out.print(f"logged in as {got.username} at {got.issuer}; token kept in {credentials_path()}",
              markup=False, highlight=False)


@app.command("publish")
def publish(directory: Annotated[str, typer.Argument(help="directory to publish")],
            name: Annotated[str | None, typer.Option(
                help="repository name (NAME.git); default: the directory's name")] = None,
            output: opt.OutputOpt = Output.table) -> None:
    """Push DIRECTORY's files as a new commit on main of NAME.git on the lab Git server
    (NAME defaults to DIRECTORY's own name, e.g. var/myrepo → myrepo.git)."""
    from pathlib import Path

    from metallo.devstack.control import status as stack_status
    from metallo.devstack.gitrepo import PublishError
    from metallo.devstack.gitrepo import publish as publish_repository

    explicit = repository_name(directory, name) if name is not None else None  # usage first
    if not Path(directory).is_dir():
        raise CliError(f"no such directory: {directory}", "pass the directory holding "
                       "actions.yaml (its files become a commit on main of NAME.git)", Exit.NOT_FOUND,
                       code="directory-not-found")
    repository = explicit or repository_name(directory, None)
    state = stack_status()
    if state is None:
        raise CliError("the dev stack is not running", "start it with `metallo dev up`",
                       Exit.NOT_FOUND, code="stack-not-running")
    try:
        url, commit = publish_repository(Path(directory), repository, edge_url=state["edge_url"])
    except (PublishError, OSError) as exc:
        raise CliError(f"cannot publish {directory}: {exc}",
                       "check the directory and `metallo dev status`, then retry",
                       Exit.FAILED, code="publish-failed") from None
    if output is Output.json:
        print_json({"repository_url": url, "commit": commit, "branch": "main"})
    else:
        out.print(f"{url} main {commit}")


@app.command("clone")
def clone(repository: Annotated[str, typer.Argument(
              help="a lab repository: its name (demo) or URL (https://…/git/demo.git)")],
          directory: Annotated[str | None, typer.Argument(
              help="where to clone it; default: ./NAME")] = None,
          branch: Annotated[str | None, typer.Option(help="check out this branch")] = None,
          output: opt.OutputOpt = Output.table) -> None:
    """Clone a repository of the lab Git server — to read what Runs pushed (outputs,
    metrics) — with the dev stack's operator credential, which is not stored in the
    clone (run it again for later outputs)."""
    from pathlib import Path

    from metallo.devstack.control import status as stack_status
    from metallo.devstack.gitrepo import PublishError, valid_name
    from metallo.devstack.gitrepo import clone as clone_repository
    from metallo.repository_policy import scheme_refusal

    refused = scheme_refusal(repository)
    if refused is not None:
        raise CliError(f"{repository}: {refused.message}", "pass NAME or the https:// URL "
                       "`metallo dev publish` printed", Exit.USAGE, code=refused.code)
    state = stack_status()
    if state is None:
        raise CliError("the dev stack is not running", "start it with `metallo dev up`",
                       Exit.NOT_FOUND, code="stack-not-running")
    prefix = f"{state['edge_url']}/git/"
    name = repository[len(prefix):] if repository.startswith(prefix) else repository
    name = name.removesuffix(".git")
    if not valid_name(name):
        raise CliError(f"{repository!r} is not a lab repository name or URL",
                       f"pass NAME or {prefix}NAME.git (`metallo dev publish` printed it)",
                       Exit.USAGE, code="invalid-argument")
    destination = Path(directory or name)
    try:
        commit = clone_repository(f"{prefix}{name}.git", destination.resolve(), branch=branch)
    except (PublishError, OSError) as exc:
        raise CliError(f"cannot clone {name}.git: {exc}",
                       "check the name (`metallo dev publish` printed the URL), the branch "
                       "and `metallo dev status`", Exit.FAILED, code="clone-failed") from None
    if output is Output.json:
        print_json({"repository_url": f"{prefix}{name}.git", "directory": str(destination),
                    "commit": commit})
    else:
        out.print(f"{destination} {commit}")
