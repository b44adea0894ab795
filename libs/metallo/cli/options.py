"""Options shared by the commands (each command declares the ones it takes)."""

from __future__ import annotations

from typing import Annotated

import typer

from metallo.cli.render import Output

Member = Annotated[str | None, typer.Option(
    "--member", envvar="METALLO_MEMBER", help="acting member id (default: config file, else the member you logged in as; "
         "it must be that member)")]
Project = Annotated[str | None, typer.Option(
    "--project", "-p", envvar="METALLO_PROJECT", help="Project id (default: config file)")]
OutputOpt = Annotated[Output, typer.Option(
    "--output", "-o", case_sensitive=False, help="table (people) or json (scripts)")]
Wait = Annotated[bool, typer.Option("--wait", "-w", help="wait for the end, showing progress")]
WaitTimeout = Annotated[float | None, typer.Option(
    "--timeout", min=1, help="give up waiting after this many seconds (exit 4)")]
CommandId = Annotated[str | None, typer.Option(
    "--command-id", help="UUID of an earlier attempt whose outcome was uncertain (safe retry)")]
Quiet = Annotated[bool, typer.Option("--quiet", "-q", help="no progress lines")]
QuietRun = Annotated[bool, typer.Option(
    "--quiet", "-q", help="no progress lines; at the end one line (Run, outcome, reason), "
    "not the Run's table")]
