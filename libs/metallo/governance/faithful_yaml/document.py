"""A loaded YAML document and its problems: the bounds applied before loading
(:class:`Limits`), one located :class:`Problem`, the :class:`DocumentError` that lists
them all, and the :class:`Document` with the source position of every value."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Limits:
    """Bounds applied before any content is trusted.

    max_bytes: size of the encoded file in bytes (default 1 MiB).
    max_depth: nesting of mappings/sequences.
    max_aliases: number of ``*alias`` references in the text.
    max_nodes: nodes visited after alias expansion (stops alias bombs).
    """

    max_bytes: int = 1024 * 1024
    max_depth: int = 32
    max_aliases: int = 200
    max_nodes: int = 200_000


@dataclass(frozen=True)
class Problem:
    """One problem in a document: where it is and what is wrong.

    line and column are 1-based (0 when the problem concerns the whole file).
    field is a dotted path such as ``actions.train.resources.gpus`` ("" for the
    whole document).
    """

    file: str
    line: int
    column: int
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}" if self.line else self.file
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class DocumentError(ValueError):
    """A document was refused; ``problems`` lists every problem found (in file order)."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems = sorted(problems, key=lambda p: (p.line, p.column, p.field, p.message))
        super().__init__(
            f"{len(self.problems)} problem(s):\n" + "\n".join(f"  {p}" for p in self.problems)
        )


@dataclass
class Document:
    """A loaded document: plain JSON-compatible ``data`` plus source positions.

    ``value_at[path]`` and ``key_at[path]`` give the 1-based (line, column) of a
    value and of the key that names it.
    """

    source: str
    data: Any
    value_at: dict[Path, tuple[int, int]] = field(default_factory=dict)
    key_at: dict[Path, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: Path, *, key: bool = False) -> tuple[int, int]:
        """The (line, column) of ``path`` (its key when ``key``), else of its nearest parent."""
        p = tuple(path)
        while True:
            if key and p in self.key_at:
                return self.key_at[p]
            if p in self.value_at:
                return self.value_at[p]
            if not p:
                return (1, 1)
            p = p[:-1]

    def problem(self, path: Path, message: str, *, key: bool = False) -> Problem:
        """A :class:`Problem` located at ``path``."""
        line, col = self.locate(path, key=key)
        return Problem(self.source, line, col, dotted(path), message)


def dotted(path: Path) -> str:
    """``("actions", "train", "argv", 2)`` → ``actions.train.argv[2]``.

    Keys are shown with :func:`printable`, so a field never carries text that
    cannot be encoded or stored (NUL, lone surrogates).
    """
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + printable(str(part))
    return out


def printable(text: str) -> str:
    """``text`` with NUL shown as ``\\0`` and lone surrogates as ``\\udXXX`` (valid UTF-8, no NUL)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8").replace("\0", "\\0")


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored as JSON text in PostgreSQL or sent as UTF-8, or None.

    Refused: U+0000 (NUL) anywhere, and lone surrogates (U+D800..U+DFFF), which
    have no UTF-8 encoding.
    """
    if "\0" in text:
        return "text holds a NUL character (\\0), which cannot be stored; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return (f"text holds a lone surrogate (\\u{ord(text[e.start]):04x}), which is not valid "
                "UTF-8; write the character itself or its 8-digit \\UXXXXXXXX escape")
    return None
