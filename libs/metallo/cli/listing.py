"""One page of a ``metallo … list`` command (``run list``, ``pipeline list``,
``collection list``): the page request, then the page as JSON for scripts or as a
table for people, with the whole command that lists the next page."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from metallo.cli.render import Output, next_page_command, out, print_json, print_list_table


def page_request(limit: int, page_token: str):
    """The contract's ``PageRequest`` for a page of ``limit`` items after ``page_token``."""
    from metallo.common.v1 import common_pb2

    return common_pb2.PageRequest(page_size=limit, page_token=page_token)


@dataclass(frozen=True)
class Listing:
    """How one list command shows a page.

    ``key``: the JSON document's list (``{"pipelines": [...], "next_page_token": ...}``);
    ``title`` and ``columns``: the table's; ``empty``: what is said instead of an empty
    table (`` on this page`` is added past the first page); ``command`` and ``options``:
    the command and the options that shaped this page, for the next page's command.
    """

    key: str
    title: str
    columns: Sequence[str]
    empty: str
    command: str
    options: dict[str, str | int | bool | None] = field(default_factory=dict)


def print_page(listing: Listing, items: Iterable[Any], *, row: Callable[[Any], Sequence[str]],
               as_json: Callable[[Any], dict], page_token: str, next_token: str,
               output: Output) -> None:
    """Print one page of ``items``: with ``-o json`` one document (each item through
    ``as_json``, and ``next_page_token``); else a table with one ``row(item)`` each, and
    ``more: <command> --page-token TOKEN`` when there is a next page."""
    items = list(items)
    if output is Output.json:
        print_json({listing.key: [as_json(i) for i in items], "next_page_token": next_token})
        return
    from rich.table import Table

    table = Table(title=listing.title, title_justify="left")
    for column in listing.columns:
        table.add_column(column)
    for item in items:
        table.add_row(*row(item))
    print_list_table(table, empty=listing.empty + (" on this page" if page_token else ""))
    if next_token:
        out.print("more: " + next_page_command(listing.command, next_token, listing.options),
                  highlight=False)
