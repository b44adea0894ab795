"""Output of ``metallo``: results on stdout (a Rich table, or one JSON document with
``--output json``), progress and errors on stderr so JSON stays machine-readable."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from enum import Enum
from typing import Any

from google.protobuf import json_format
from google.protobuf.message import Message
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from metallo.cli.exits import CliError

# markup=False: tables and lines carry user and server text ("[a-z]" in a message or an
# action name must print as written); the few styled lines pass markup=True.
out = Console(soft_wrap=True, markup=False)
err = Console(stderr=True, soft_wrap=True, markup=False)


class Output(str, Enum):
    """``--output`` choices."""

    table = "table"
    json = "json"


def as_dict(message: Message) -> dict[str, Any]:
    """Every field of ``message`` (defaults included), proto field names, int64 as numbers."""
    return json_format.MessageToDict(message, always_print_fields_with_no_presence=True,
                                     preserving_proto_field_name=True,
                                     unquote_int64_if_possible=True)


def print_json(value: Any) -> None:
    """One JSON document on stdout (sorted keys, no colour, one line)."""
    sys.stdout.write(json.dumps(value, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def print_error(error: CliError) -> None:
    """``error: …`` and ``next: …`` on stderr."""
    # Messages carry user and server text ("[/x]" is a valid action name to type):
    # escape it so Rich never reads it as markup.
    err.print(f"[bold red]error:[/] {escape(error.message)}", markup=True, highlight=False)
    err.print(f"[bold]next:[/] {escape(error.hint)}", markup=True, highlight=False)


def timestamp(value) -> str:
    """ISO-8601 UTC text of a protobuf Timestamp; '' when unset."""
    if value is None or (value.seconds == 0 and value.nanos == 0):
        return ""
    return value.ToDatetime(tzinfo=UTC).isoformat(timespec="seconds")


def seconds_between(start, end=None) -> float | None:
    """Seconds from Timestamp ``start`` to ``end`` (or now); None when start is unset."""
    if start is None or (start.seconds == 0 and start.nanos == 0):
        return None
    begin = start.ToDatetime(tzinfo=UTC)
    finish = (end.ToDatetime(tzinfo=UTC)
              if end is not None and (end.seconds or end.nanos) else datetime.now(UTC))
    return max(0.0, (finish - begin).total_seconds())


def print_list_table(table, *, empty: str | None = None) -> None:
    """Print a list table at its natural width, one line per row, even on a narrow or
    piped console (80 columns): ids stay whole and copyable, as with ``kubectl get``;
    the terminal may wrap the long lines. With no rows, print ``empty`` instead of
    an empty frame, when given."""
    from rich.measure import Measurement

    if empty is not None and table.row_count == 0:
        out.print(empty)
        return

    for column in table.columns:
        column.no_wrap = True
    natural = Measurement.get(out, out.options.update(width=10_000), table).maximum
    if natural <= out.width:
        out.print(table)
        return
    # Console.print clamps ``width`` to the console's: render on a console as wide as the rows.
    wide = Console(width=natural, soft_wrap=True, markup=False, color_system=out.color_system)
    wide.print(table)


def key_value_table(title: str, rows: list[tuple[str, Any]]) -> Table:
    """A two-column table of the non-empty ``rows``."""
    table = Table(title=title, show_header=False, title_justify="left", box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    for key, value in rows:
        if value not in (None, "", [], {}):
            table.add_row(key, str(value))
    return table


def native_jobs_text(jobs) -> str:
    """``stage-in=101 compute=102 …`` for repeated NativeJob."""
    return " ".join(f"{j.stage}={j.job_id}" for j in jobs)


def next_page_command(command: str, token: str, options: dict[str, str | int | bool | None]) -> str:
    """The whole command that lists the next page, for people to copy: ``command`` (e.g.
    ``metallo run list``), the ``options`` that shaped this page (``{"--project": "demo",
    "--active": True, "--outcome": None}``: True is a flag, None/False/"" left out) and
    ``--page-token TOKEN``; values are shell-quoted."""
    import shlex

    words = [command]
    for name, value in options.items():
        if value is True:
            words.append(name)
        elif value not in (None, False, ""):
            words += [name, shlex.quote(str(value))]
    return " ".join([*words, "--page-token", shlex.quote(token)])
