"""The ``metallo`` command tree (Typer)."""

from __future__ import annotations

import typer

from metallo.cli import actions, audit, collection, grants, login, pipelines, repos, runs, sites

EPILOG = ("Exit codes: 0 succeeded · 1 failed or cancelled · 2 usage or validation error · "
          "3 not found · 4 outcome uncertain. Settings: --member/METALLO_MEMBER, "
          "--project/METALLO_PROJECT, METALLO_AMQP_URL, METALLO_CONFIG; `metallo login` first "
          "(docs/quickstart.md).")

app = typer.Typer(name="metallo", no_args_is_help=True, add_completion=False,
                  pretty_exceptions_enable=False, epilog=EPILOG,
                  help="Run research workloads on your Project's Sites.")
site = typer.Typer(no_args_is_help=True,
                   help="Sites (operators): Runtime command grants, draining.")
site.add_typer(grants.app, name="grant")
for _name, _command in sites.COMMANDS:
    site.command(_name)(_command)

app.add_typer(actions.app, name="action")
app.add_typer(pipelines.app, name="pipeline")
app.add_typer(collection.app, name="collection")
app.add_typer(runs.app, name="run")
app.add_typer(repos.app, name="repo")
app.add_typer(site, name="site")
app.add_typer(audit.app, name="audit")
app.command("login")(login.login)
app.command("logout")(login.logout)


def add_dev_group() -> None:
    """``metallo dev up|down|status`` (imported lazily: it needs the services' code)."""
    from metallo.cli import dev

    app.add_typer(dev.app, name="dev")


add_dev_group()


def command():
    """The command tree as it runs: Typer's Click command for :data:`app`, with every
    flag (``--help``, ``--wait``, …) shown in help without a value type — a flag takes
    no value, so ``--help <bool>`` would tell the reader to type one."""
    root = typer.main.get_command(app)
    _hide_flag_types(root, typer.Context(root, info_name="metallo"))
    return root


def _hide_flag_types(command, ctx) -> None:
    for param in command.get_params(ctx):  # includes the help option
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for name, sub in getattr(command, "commands", {}).items():
        _hide_flag_types(sub, typer.Context(sub, info_name=name, parent=ctx))
