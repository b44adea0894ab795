"""Bounded, schema-directed YAML loading that keeps what the author wrote.

Both operator-edited files (the governance file) and member-authored files
(``actions.yaml``, issue 3 item 2) go through here. The rules:

* The document is composed into ruamel.yaml nodes and converted by walking the
  node tree *alongside a JSON Schema*. A plain scalar becomes a number, boolean
  or null only where the schema allows that type; where the schema wants a
  string, the exact text the author typed is kept. So a 40-hex commit made only
  of digits, a version such as ``3.10``, ``0755`` or ``007`` stay strings, and
  keys are always their literal text (``on``, ``yes`` and ``no`` included).
  Booleans are YAML 1.2 only (``true``/``false``); ``yes``/``no`` are text.
* Inputs are bounded before they are trusted: size in bytes, nesting depth,
  alias count and the number of nodes after alias expansion (alias bombs).
* Every problem is collected with its file, line, column and field path, and
  all of them are reported at once in :class:`DocumentError`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import jsonschema
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

Path = tuple[str | int, ...]

_CORE = "tag:yaml.org,2002:"
_MERGE = _CORE + "merge"


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


class _SchemaView:
    """Just enough JSON Schema navigation to know which types a location allows."""

    def __init__(self, root: dict):
        self.root = root

    def deref(self, schema: Any) -> dict:
        seen = 0
        while isinstance(schema, dict) and "$ref" in schema and seen < 32:
            ref = schema["$ref"]
            if not ref.startswith("#/"):
                return {}
            node: Any = self.root
            for part in ref[2:].split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
            schema = node
            seen += 1
        return schema if isinstance(schema, dict) else {}

    def branches(self, schema: Any) -> list[dict]:
        s = self.deref(schema)
        out = [s]
        for k in ("oneOf", "anyOf", "allOf"):
            for sub in s.get(k, []):
                out.extend(self.branches(sub))
        return out

    def types(self, schema: Any) -> set[str] | None:
        """Allowed JSON types, or None when unconstrained."""
        found: set[str] = set()
        constrained = False
        for b in self.branches(schema):
            t = b.get("type")
            if isinstance(t, str):
                found.add(t)
                constrained = True
            elif isinstance(t, list):
                found.update(t)
                constrained = True
            if "const" in b or "enum" in b:
                values = [b["const"]] if "const" in b else b["enum"]
                for v in values:
                    found.add(_json_type(v))
                constrained = True
        return found if constrained else None

    def child(self, schema: Any, key: str | int) -> Any:
        """The sub-schema for a mapping key or sequence index (None when unknown)."""
        for b in self.branches(schema):
            if isinstance(key, int):
                if "items" in b and isinstance(b["items"], dict):
                    return b["items"]
                continue
            props = b.get("properties", {})
            if key in props:
                return props[key]
            for pattern, sub in b.get("patternProperties", {}).items():
                if re.search(pattern, key):
                    return sub
            ap = b.get("additionalProperties")
            if isinstance(ap, dict):
                return ap
        return None


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


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


class _Loader:
    def __init__(self, source: str, schema: dict | None, limits: Limits):
        self.source = source
        self.view = _SchemaView(schema or {})
        self.limits = limits
        self.problems: list[Problem] = []
        self.nodes = 0
        self.doc = Document(source=source, data=None)
        self.over_budget = False

    def add(self, line: int, col: int, path: Path, message: str) -> None:
        self.problems.append(Problem(self.source, line, col, dotted(path), message))

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
                        self.add(mark.line + 1, mark.column + 1, (), "only one YAML document is allowed")
                        return False
                elif isinstance(ev, (MappingStartEvent, SequenceStartEvent)):
                    depth += 1
                    if depth > self.limits.max_depth:
                        self.add(
                            mark.line + 1, mark.column + 1, (),
                            f"nesting deeper than {self.limits.max_depth} levels is refused",
                        )
                        return False
                elif isinstance(ev, (MappingEndEvent, SequenceEndEvent)):
                    depth -= 1
                elif isinstance(ev, AliasEvent):
                    aliases += 1
                    if aliases > self.limits.max_aliases:
                        self.add(
                            mark.line + 1, mark.column + 1, (),
                            f"more than {self.limits.max_aliases} aliases is refused",
                        )
                        return False
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
        nt = _json_type(natural)
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
    size, encoding, YAML syntax, tags, nesting depth and alias expansion bounds.
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


def schema_problems(doc: Document, schema: dict) -> list[Problem]:
    """Every JSON Schema violation of ``doc.data``, located by line (deepest cause first)."""
    validator_cls = jsonschema.validators.validator_for(schema)
    validator = validator_cls(schema)
    out: list[Problem] = []
    seen: set[tuple] = set()
    for err in validator.iter_errors(doc.data):
        for leaf in _leaves(err):
            for p in _describe(doc, leaf):
                k = (p.line, p.column, p.field, p.message)
                if k not in seen:
                    seen.add(k)
                    out.append(p)
    return out


def _leaves(err: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """For oneOf/anyOf failures, report the branch that got furthest, not the whole tree."""
    if (err.validator in ("oneOf", "anyOf") and not isinstance(err.instance, (dict, list))
            and isinstance(err.schema, dict) and err.schema.get("description")):
        return [err]  # a scalar matching no form: the schema's own description says best what is wanted
    if err.validator in ("oneOf", "anyOf") and err.context:
        best = jsonschema.exceptions.best_match(err.context)
        return _leaves(best) if best is not None else [err]
    return [err]


def _describe(doc: Document, err: jsonschema.ValidationError) -> list[Problem]:
    path: Path = tuple(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        patterns = list(err.schema.get("patternProperties", {}))
        extra = [
            k for k in err.instance
            if k not in allowed and not any(re.search(p, k) for p in patterns)
        ]
        if extra:
            known = ", ".join(sorted(allowed)) or "none"
            return [doc.problem(path + (k,), f"unknown field {k!r} (allowed: {known})", key=True)
                    for k in extra]
    if err.validator in ("oneOf", "anyOf") and isinstance(err.schema, dict) and err.schema.get("description"):
        wanted = err.schema["description"].rstrip(".")
        return [doc.problem(path, f"got {err.instance!r}; expected {wanted[:1].lower()}{wanted[1:]}")]
    if err.validator == "required":
        return [doc.problem(path, err.message)]
    if err.validator == "type":
        wanted = err.validator_value
        wanted = " or ".join(wanted) if isinstance(wanted, list) else wanted
        return [doc.problem(path, f"must be of type {wanted}, got {err.instance!r}")]
    if err.validator in ("enum", "const"):
        values = err.validator_value if err.validator == "enum" else [err.validator_value]
        return [doc.problem(path, f"{err.instance!r} is not one of {', '.join(map(repr, values))}")]
    if "propertyNames" in err.relative_schema_path or "propertyNames" in err.absolute_schema_path:
        return [doc.problem(path + (err.instance,), f"name {err.instance!r}: {err.message}", key=True)]
    return [doc.problem(path, err.message)]
