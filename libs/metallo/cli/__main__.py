"""Entry point of ``metallo`` (pyproject ``[project.scripts]``): runs the command
tree and turns every failure into a message, a next step and a documented exit
code (``metallo.cli.exits``)."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator

import typer

from metallo.cli.exits import CliError, Exit, error_document
from metallo.cli.render import print_error, print_json


def wants_json(args: list[str]) -> bool:
    """True when the command line asks for ``--output json`` (``-o json``, ``--output=json``,
    ``-ojson``): its errors are then also one JSON object on stdout, for scripts."""
    for i, arg in enumerate(args):
        if arg == "--":
            break
        if arg in ("-o", "--output") and i + 1 < len(args) and args[i + 1] == "json":
            return True
        if arg in ("--output=json", "-ojson", "-o=json"):
            return True
    return False


# Libraries that log a failure the CLI reports itself, as a CliError with a next step:
# with no logging configured, Python's last-resort handler prints their lines raw on
# stderr (aiormq: "error when creating transport: <AMQPConnectionError …>" before
# "cannot reach RabbitMQ").
QUIET_LOGGERS = ("aiormq", "aio_pika", "faststream")


@contextlib.contextmanager
def quiet_library_logs() -> Iterator[None]:
    """Raise :data:`QUIET_LOGGERS` to CRITICAL while the CLI runs, then restore their
    levels (``main`` also runs inside tests). ``METALLO_DEBUG=1`` leaves them as they are."""
    if os.environ.get("METALLO_DEBUG") == "1":
        yield
        return
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def main(argv: list[str] | None = None) -> int:
    """Run ``metallo`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    with quiet_library_logs():
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    """:func:`main` without the log quieting: runs the command tree, maps every failure."""
    from metallo.cli.app import command

    args = list(sys.argv[1:] if argv is None else argv)
    as_json = wants_json(args)

    def report(error: CliError) -> int:
        print_error(error)
        if as_json:
            print_json(error_document(error))
        return int(error.exit_code)

    try:
        result = command()(args, prog_name="metallo", standalone_mode=False)
    except CliError as error:
        return report(error)
    except typer.Exit as done:
        return int(done.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        return report(CliError("interrupted", "the request or Run may go on: check it with "
                               "`metallo run list --active` or `metallo pipeline list`",
                               Exit.UNCERTAIN, code="interrupted"))
    except typer.TyperException as error:
        # Usage errors of the (vendored) Click parser: wrong arguments or options.
        if type(error).__name__ == "NoArgsIsHelpError":
            error.show()
            return int(Exit.USAGE)
        ctx = getattr(error, "ctx", None)
        if ctx is not None:
            sys.stderr.write(ctx.get_usage() + "\n")
        return report(CliError(error.format_message(), "see `metallo --help` or `metallo COMMAND "
                               "--help` for the arguments", Exit.USAGE, code="usage"))
    except Exception as error:  # a bug or an unforeseen failure: still say what to do next
        if os.environ.get("METALLO_DEBUG") == "1":
            raise
        return report(CliError(f"unexpected {type(error).__name__}: {error}",
                               "run it again with METALLO_DEBUG=1 for the traceback and report it; "
                               "a command may have been applied (retry with --command-id)",
                               Exit.UNCERTAIN, code="unexpected-error"))
    return int(result) if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
