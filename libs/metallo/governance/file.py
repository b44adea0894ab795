"""Reading the governance file: validation with lines, and re-reading on change."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from types import MappingProxyType
from typing import Any

from metallo.governance.faithful_yaml import (
    Document,
    DocumentError,
    Limits,
    Problem,
    load_document,
    schema_problems,
)
from metallo.governance.model import Binding, Governance, Member, Project, Site

_SCHEMA_NAME = "governance.schema.json"


class GovernanceError(DocumentError):
    """The governance file is missing or invalid; ``problems`` lists every problem with its line."""


def schema_path() -> Path:
    """Where ``governance.schema.json`` lives: ``$METALLO_CONTRACTS_DIR`` or the repo's ``contracts/``."""
    env = os.environ.get("METALLO_CONTRACTS_DIR")
    base = Path(env) if env else Path(__file__).resolve().parents[3] / "contracts"
    return base / _SCHEMA_NAME


_schema_cache: dict[str, Any] = {}


def governance_schema() -> dict:
    """The governance JSON Schema (parsed once per process)."""
    key = str(schema_path())
    if key not in _schema_cache:
        _schema_cache[key] = json.loads(Path(key).read_text(encoding="utf-8"))
    return _schema_cache[key]


def parse_governance(content: bytes | str, *, source: str = "governance.yaml") -> Governance:
    """Parse and check a governance document.

    Checks the JSON Schema (contracts/governance.schema.json) and the references
    between sections: a Project's Sites and members must exist, a member's
    bindings must name known Sites. Returns a :class:`Governance` snapshot.
    Raises :class:`GovernanceError` with every problem and its line; nothing
    partial is ever returned.
    """
    schema = governance_schema()
    try:
        doc, problems = load_document(content, source=source, schema=schema,
                                      limits=Limits(max_bytes=4 * 1024 * 1024))
    except DocumentError as e:
        raise GovernanceError(e.problems) from None
    problems += schema_problems(doc, schema)
    problems += _reference_problems(doc)
    if problems:
        raise GovernanceError(problems)
    return _build(doc.data)


def _mapping(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _reference_problems(doc: Document) -> list[Problem]:
    """References between sections; tolerant of shapes the schema already refused."""
    data = _mapping(doc.data)
    sites, members, projects = (_mapping(data.get(k)) for k in ("sites", "members", "projects"))
    out: list[Problem] = []
    for mid, m in members.items():
        for sid in _mapping(_mapping(m).get("bindings")):
            if sid not in sites:
                out.append(doc.problem(("members", mid, "bindings", sid),
                                       f"binding names unknown Site {sid!r}", key=True))
    for pid, p in projects.items():
        p_sites = _mapping(p).get("sites")
        for i, sid in enumerate(p_sites if isinstance(p_sites, list) else []):
            if isinstance(sid, str) and sid not in sites:
                out.append(doc.problem(("projects", pid, "sites", i), f"unknown Site {sid!r}"))
        for mid in _mapping(_mapping(p).get("members")):
            if mid not in members:
                out.append(doc.problem(("projects", pid, "members", mid),
                                       f"unknown member {mid!r}", key=True))
    for mid in _mapping(data.get("operators")):
        if mid not in members:
            out.append(doc.problem(("operators", mid), f"unknown member {mid!r}", key=True))
    return out


def _build(data: dict) -> Governance:
    sites = {
        sid: Site(
            id=sid,
            name=s.get("name", sid),
            environment=s["environment"],
            ready=s["ready"],
            max_wall_seconds=s.get("max_wall_seconds"),
            concurrent_run_limit=s.get("concurrent_run_limit"),
            gpu_classes=MappingProxyType(dict(s.get("gpu_classes") or {})),
        )
        for sid, s in data["sites"].items()
    }
    members = {
        mid: Member(
            id=mid,
            name=m.get("name", mid),
            bindings=MappingProxyType({
                sid: Binding(site_username=b["site_username"], account=b["account"])
                for sid, b in (m.get("bindings") or {}).items()
            }),
        )
        for mid, m in data["members"].items()
    }
    projects = {
        pid: Project(
            id=pid,
            name=p.get("name", pid),
            members=tuple(p["members"]),
            sites=tuple(p["sites"]),
            concurrent_run_limit=p.get("concurrent_run_limit"),
            capabilities=MappingProxyType({mid: frozenset(caps) for mid, caps in p["members"].items()}),
        )
        for pid, p in data["projects"].items()
    }
    return Governance(
        projects=MappingProxyType(projects),
        members=MappingProxyType(members),
        sites=MappingProxyType(sites),
        operators=MappingProxyType({mid: frozenset(caps) for mid, caps
                                    in (data.get("operators") or {}).items()}),
    )


class GovernanceFile:
    """A governance file on disk, re-read whenever it changes.

    ``current()`` costs one ``stat`` when nothing changed: it compares
    (mtime in ns, size, inode) with the last read and re-parses only on a
    difference (an operator's in-place edit or an atomic rename). Safe to share
    between threads and asyncio tasks.
    """

    def __init__(self, path: str | os.PathLike[str]):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._key: tuple[int, int, int] | None = None
        self._snapshot: Governance | None = None
        self._error: GovernanceError | None = None

    def current(self) -> Governance:
        """The snapshot for the file as it is now.

        Raises :class:`GovernanceError` when the file is missing, unreadable or
        invalid (every problem with its line). An invalid file is refused as a
        whole: the previous snapshot is not served in its place, so a revoked
        capability can never linger behind a typo.
        """
        try:
            st = os.stat(self.path)
        except OSError as e:
            raise GovernanceError([Problem(str(self.path), 0, 0, "", f"cannot read governance file: {e.strerror}")]) from None
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
        with self._lock:
            if key != self._key:
                self._load(key)
            if self._error is not None:
                raise self._error
            assert self._snapshot is not None
            return self._snapshot

    def _load(self, key: tuple[int, int, int]) -> None:
        try:
            content = self.path.read_bytes()
        except OSError as e:
            self._key, self._snapshot = None, None
            self._error = GovernanceError([Problem(str(self.path), 0, 0, "", f"cannot read governance file: {e.strerror}")])
            return
        try:
            snapshot = parse_governance(content, source=str(self.path))
        except GovernanceError as e:
            self._key, self._snapshot, self._error = key, None, e
            return
        self._key, self._snapshot, self._error = key, snapshot, None
