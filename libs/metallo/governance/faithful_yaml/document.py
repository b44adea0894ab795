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
    """``("actions", "train", "argv", 2)`` → ``actions.train.argv[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out
