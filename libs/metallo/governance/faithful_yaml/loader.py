"""Bounded, schema-directed loading (see the package doc): an event pass that checks
the bounds, tags and document count, then a conversion of the node tree alongside the
schema that keeps text where the schema wants text."""

from __future__ import annotations

import math
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from metallo.governance.faithful_yaml.document import (
    Document,
    DocumentError,
    Limits,
    Path,
    Problem,
    dotted,
    text_problem,
)
from metallo.governance.faithful_yaml.schema_view import SchemaView, json_type
from metallo.governance.faithful_yaml.validation import schema_problems

_CORE = "tag:yaml.org,2002:"
_MERGE = _CORE + "merge"


def _core_int(text: str) -> int:
    """YAML 1.2 core integer: decimal (leading zeros allowed), 0o octal, 0x hex."""
    t = text.replace("_", "")
    sign = -1 if t.startswith("-") else 1
    s = t.lstrip("+-")
    if s[:2].lower() == "0x":
        return sign * int(s, 0)
    if s[:2].lower() == "0o":
        return sign * int(s, 0)
    return sign * int(s, 10)


class _Loader:
    def __init__(self, source: str, schema: dict | None, limits: Limits):
        self.source = source
        self.view = SchemaView(schema or {})
        self.limits = limits
        self.problems: list[Problem] = []
        self.nodes = 0
        self.doc = Document(source=source, data=None)
        self.over_budget = False
        self.bad_text: list[Problem] = []
        self.bad_at: set[tuple[int, int]] = set()

    def check_text(self, text: str, node: Node, path: Path) -> None:
        """Record text that cannot be stored or encoded (NUL, lone surrogates) at ``node``."""
        mark = node.start_mark
        if (why := text_problem(text)) is not None and (mark.line, mark.column) not in self.bad_at:
            self.bad_at.add((mark.line, mark.column))  # an alias repeats its node: said once
            self.bad_text.append(Problem(self.source, mark.line + 1, mark.column + 1, dotted(path), why))

    def add(self, line: int, col: int, path: Path, message: str) -> None:
        self.problems.append(Problem(self.source, line, col, dotted(path), message))

    def refuse(self, mark, message: str) -> bool:
        """Record a problem that stops reading at ``mark`` (0-based); False."""
        self.add(mark.line + 1, mark.column + 1, (), message)
        return False

    # -- pass 1: events only (iterative parser, so depth cannot blow the stack)
    def scan(self, text: str) -> bool:
        depth = 0
        aliases = 0
        documents = 0
        yaml = YAML(typ="rt")
        try:
            for ev in yaml.parse(text):
                mark = ev.start_mark
                if isinstance(ev, DocumentStartEvent):
                    documents += 1
                    if documents > 1:
                        return self.refuse(mark, "only one YAML document is allowed")
                elif isinstance(ev, (MappingStartEvent, SequenceStartEvent)):
                    depth += 1
                    if depth > self.limits.max_depth:
                        return self.refuse(
                            mark, f"nesting deeper than {self.limits.max_depth} levels is refused")
                elif isinstance(ev, (MappingEndEvent, SequenceEndEvent)):
                    depth -= 1
                elif isinstance(ev, AliasEvent):
                    aliases += 1
                    if aliases > self.limits.max_aliases:
                        return self.refuse(
                            mark, f"more than {self.limits.max_aliases} aliases is refused")
                tag = getattr(ev, "tag", None)
                if (isinstance(ev, (ScalarEvent, MappingStartEvent, SequenceStartEvent)) and tag
                        and not str(tag).startswith(_CORE) and str(tag) != "!"):
                    self.add(mark.line + 1, mark.column + 1, (), f"unsupported YAML tag {tag}")
        except MarkedYAMLError as e:
            m = e.problem_mark or e.context_mark
            line, col = (m.line + 1, m.column + 1) if m else (0, 0)
            self.add(line, col, (), f"invalid YAML: {e.problem or e.context}")
            return False
        except YAMLError as e:
            self.add(0, 0, (), f"invalid YAML: {e}")
            return False
        return not self.problems

    # -- pass 2: schema-directed conversion of the node tree
    def convert(self, node: Node, schema: Any, path: Path, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > self.limits.max_nodes or depth > self.limits.max_depth:
            if not self.over_budget:
                self.over_budget = True
                self.add(
                    node.start_mark.line + 1, node.start_mark.column + 1, path,
                    "document expands beyond the allowed size (aliases or nesting); refused",
                )
            return None
        self.doc.value_at.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, ScalarNode):
            return self.scalar(node, schema, path)
        if isinstance(node, SequenceNode):
            return [
                self.convert(item, self.view.child(schema, i), path + (i,), depth + 1)
                for i, item in enumerate(node.value)
            ]
        if isinstance(node, MappingNode):
            return self.mapping(node, schema, path, depth)
        self.add(node.start_mark.line + 1, node.start_mark.column + 1, path, "unsupported YAML node")
        return None

    def mapping(self, node: MappingNode, schema: Any, path: Path, depth: int) -> dict:
        out: dict[str, Any] = {}
        first_line: dict[str, int] = {}
        merges: list[Node] = []
        for knode, vnode in node.value:
            if knode.tag == _MERGE:
                merges.append(vnode)
                continue
            if not isinstance(knode, ScalarNode):
                self.add(knode.start_mark.line + 1, knode.start_mark.column + 1, path,
                         "mapping keys must be plain text")
                continue
            key = str(knode.value)
            self.check_text(key, knode, path + (key,))
            kline, kcol = knode.start_mark.line + 1, knode.start_mark.column + 1
            if key in out:
                self.add(kline, kcol, path + (key,),
                         f"duplicate key {key!r} (first at line {first_line[key]})")
                continue
            first_line[key] = kline
            self.doc.key_at[path + (key,)] = (kline, kcol)
            out[key] = self.convert(vnode, self.view.child(schema, key), path + (key,), depth + 1)
        # YAML merge keys (``<<: *defaults``): explicit keys win, earlier merges win.
        for m in merges:
            sources = m.value if isinstance(m, SequenceNode) else [m]
            for src in sources:
                if not isinstance(src, MappingNode):
                    self.add(src.start_mark.line + 1, src.start_mark.column + 1, path,
                             "a merge key (<<) must name a mapping or a list of mappings")
                    continue
                merged = self.mapping(src, schema, path, depth)
                for k, v in merged.items():
                    out.setdefault(k, v)
        return out

    def scalar(self, node: ScalarNode, schema: Any, path: Path) -> Any:
        text = str(node.value)
        self.check_text(text, node, path)
        tag = str(node.tag)
        allowed = self.view.types(schema) if schema is not None else None
        if node.style is not None or tag == _CORE + "str":
            natural: Any = text  # quoted, block or explicitly !!str: always text
        elif tag == _CORE + "null":
            natural = None
        elif tag == _CORE + "bool":
            natural = text.lower() == "true"
        elif tag == _CORE + "int":
            try:
                natural = _core_int(text)
            except ValueError:
                natural = text
        elif tag == _CORE + "float":
            try:
                natural = float(text.replace("_", ""))
            except ValueError:
                natural = text
            if isinstance(natural, float) and not math.isfinite(natural):
                natural = text
        else:
            natural = text  # timestamps and anything else stay as typed
        if allowed is None:
            return natural
        nt = json_type(natural)
        if nt == "number" and "number" not in allowed:
            # JSON Schema counts 4.0 as an integer; an integer field takes only
            # integers as written, so "4.0" is refused rather than stored as a float.
            return text
        if nt in allowed or (nt == "integer" and "number" in allowed):
            return natural
        if "string" in allowed:
            if natural is None and text == "":
                return None  # an empty value is not text; the schema reports it
            # The schema wants text here: keep exactly what the author typed.
            return text
        return natural


def load_document(
    content: bytes | str,
    *,
    source: str,
    schema: dict | None = None,
    limits: Limits = Limits(),
) -> tuple[Document, list[Problem]]:
    """Load one YAML document faithfully, without schema validation.

    Returns (document, problems that still allow checking the rest, such as
    duplicate keys). Raises :class:`DocumentError` for problems that stop reading:
    size, encoding, YAML syntax, tags, nesting depth, alias expansion bounds and
    text (key or value) holding NUL or a lone surrogate.
    """
    raw = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    if len(raw) > limits.max_bytes:
        raise DocumentError([Problem(source, 0, 0, "",
                                     f"file is {len(raw)} bytes; the limit is {limits.max_bytes} bytes")])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DocumentError([Problem(source, 0, 0, "", f"file is not UTF-8 text ({e.reason} at byte {e.start})")]) from None
    loader = _Loader(source, schema, limits)
    if not loader.scan(text):
        raise DocumentError(loader.problems)
    try:
        root = YAML(typ="rt").compose(text)
    except YAMLError as e:  # the event pass already parsed; kept for safety
        raise DocumentError([Problem(source, 0, 0, "", f"invalid YAML: {e}")]) from None
    except RecursionError:
        raise DocumentError([Problem(source, 0, 0, "", "nesting too deep; refused")]) from None
    loader.doc.data = None if root is None else loader.convert(root, schema, (), 0)
    if loader.over_budget:
        raise DocumentError(loader.problems)
    if loader.bad_text:
        # Text no store or wire accepts stops reading: no other message may repeat it.
        raise DocumentError(loader.bad_text)
    return loader.doc, list(loader.problems)


def load(
    content: bytes | str,
    *,
    source: str,
    schema: dict | None = None,
    limits: Limits = Limits(),
) -> Document:
    """Load one YAML document faithfully and validate it against ``schema`` (when given).

    content: the file's bytes (UTF-8) or text; source: the name used in problems
    (a path or "actions.yaml"). Returns a :class:`Document`.
    Raises :class:`DocumentError` listing every problem (size, YAML syntax,
    bounds, duplicate keys, schema violations), each with its line.
    """
    doc, problems = load_document(content, source=source, schema=schema, limits=limits)
    if schema is not None:
        problems.extend(schema_problems(doc, schema))
    if problems:
        raise DocumentError(problems)
    return doc
