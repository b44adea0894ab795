"""Parsing actions.yaml (docs/actions.md; contracts/actions.schema.json).

The file is read faithfully (what the author wrote is kept: a digit-only commit,
``3.10``, ``on``/``yes``/``no`` stay text where text is expected), bounded (1 MiB,
200 actions, depth, aliases) and checked completely: every problem is reported
at once with file, line and field.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metallo.environment_policy import EnvironmentPolicy
from metallo.governance.faithful_yaml import (
    Document,
    DocumentError,
    Limits,
    Problem,
    load_document,
    schema_problems,
)
from metallo.repository_policy import RepositoryPolicy, RepositoryRefused, scheme_refusal
from workload_portfolio.application.collection_rules import collection_problems
from workload_portfolio.domain.action_graph import graph_problems
from workload_portfolio.domain.action_types import action_type
from workload_portfolio.domain.refs import branch_problem, relative_path_problem

ACTIONS_FILE = "actions.yaml"
MAX_BYTES = 1024 * 1024
MAX_ACTIONS = 200


class ActionsFileError(DocumentError):
    """actions.yaml was refused; ``problems`` lists every problem with its line and field."""


@dataclass(frozen=True)
class ActionsFile:
    """A valid actions.yaml: its version and its actions in file order (name, mapping)."""

    version: int
    actions: tuple[tuple[str, dict], ...]

    def action(self, name: str) -> dict | None:
        """The validated mapping of action ``name``, or None."""
        for n, a in self.actions:
            if n == name:
                return a
        return None

    def needs(self, name: str) -> tuple[str, ...]:
        """The actions ``name`` needs, as written (empty when it names none)."""
        a = self.action(name) or {}
        return tuple(a.get("needs", ()))

    def when(self, name: str) -> str:
        """When ``name`` runs once its needs ended: ``success`` (default), ``failure`` or ``always``."""
        return (self.action(name) or {}).get("when", "success")

    def collection(self, name: str) -> dict | None:
        """The collection fields of ``name`` (matrix or parameters, maxActive, failFast, array), or None."""
        a = self.action(name) or {}
        if "matrix" not in a and "parameters" not in a:
            return None
        return {k: a[k] for k in ("matrix", "parameters", "maxActive", "failFast", "array") if k in a}

    @property
    def names(self) -> list[str]:
        """The action names in file order."""
        return [n for n, _ in self.actions]


_schema: dict | None = None


def actions_schema() -> dict:
    """contracts/actions.schema.json (``$METALLO_CONTRACTS_DIR`` overrides the directory)."""
    global _schema
    if _schema is None:
        env = os.environ.get("METALLO_CONTRACTS_DIR")
        base = Path(env) if env else Path(__file__).resolve().parents[3] / "contracts"
        _schema = json.loads((base / "actions.schema.json").read_text(encoding="utf-8"))
    return _schema


def parse_actions_file(content: bytes | str, *, source: str = ACTIONS_FILE,
                       environment: EnvironmentPolicy | None = None,
                       repositories: RepositoryPolicy | None = None) -> ActionsFile:
    """Parse and check an actions.yaml.

    content: the file's bytes; source: the name used in problems; environment: the
    names actions may not set (default :class:`EnvironmentPolicy`: ``LD_*``,
    ``GIT_*``, ``METALLO_*``, ``PYTHONSTARTUP``); repositories: which input repository
    URLs may be named (None: not checked here, e.g. ``check`` without a Site's policy).
    Returns :class:`ActionsFile`. Raises :class:`ActionsFileError` listing every
    problem (size over 1 MiB, over 200 actions, YAML syntax, alias bombs, nesting,
    duplicate keys, schema violations and the cross-field rules below).
    """
    limits = Limits(max_bytes=MAX_BYTES, max_depth=24, max_aliases=500, max_nodes=200_000)
    try:
        doc, problems = load_document(content, source=source, schema=actions_schema(), limits=limits)
    except DocumentError as e:
        raise ActionsFileError(e.problems) from None
    data = doc.data
    actions = data.get("actions") if isinstance(data, dict) else None
    if isinstance(actions, dict) and len(actions) > MAX_ACTIONS:
        # Refuse before the (linear, but pointless) full validation of a huge file.
        raise ActionsFileError([doc.problem(("actions",), f"{len(actions)} actions; at most {MAX_ACTIONS} are allowed")])
    problems.extend(_retitle(schema_problems(doc, actions_schema()), data))
    if isinstance(actions, dict):
        for name, action in actions.items():
            if isinstance(action, dict):
                problems.extend(_action_problems(doc, name, action,
                                                 environment or EnvironmentPolicy(), repositories))
                problems.extend(collection_problems(doc, name, action))
        problems.extend(_graph_problems(doc, actions))
    if problems:
        raise ActionsFileError(problems)
    return ActionsFile(version=data["version"], actions=tuple(actions.items()))


def _graph_problems(doc: Document, actions: dict) -> list[Problem]:
    """Unknown, self- and cyclic ``needs`` (domain/action_graph.py), each at its line."""
    needs = {
        name: [d for d in a["needs"] if isinstance(d, str)]
        for name, a in actions.items()
        if isinstance(a, dict) and isinstance(a.get("needs"), list)
    }
    out = []
    for g in graph_problems(list(actions), needs):
        path = ("actions", g.action, "needs") + ((g.index,) if g.index is not None else ())
        out.append(doc.problem(path, g.message))
    return out


def _retitle(problems: list[Problem], data: Any) -> list[Problem]:
    """Make "… should not be valid under {}" say which action type refuses the field, and
    an input URL's pattern mismatch say the repository policy's refusal and code (e.g.
    ``repository-scheme-not-allowed`` for ``http://``) when its transport is the cause."""
    out = []
    for p in problems:
        refused = _input_url_refusal(p.field, data)
        if refused is not None:
            p = Problem(p.file, p.line, p.column, p.field, f"{refused.message} ({refused.code})")
        if p.message.endswith("should not be valid under {}"):
            parts = p.field.split(".")
            kind = ""
            if len(parts) >= 3 and parts[0] == "actions":
                a = data["actions"].get(parts[1], {})
                kind = a.get("type", "") if isinstance(a, dict) else ""
            p = Problem(p.file, p.line, p.column, p.field,
                        f"'{parts[-1]}' is not allowed for type {kind}" if kind else "not allowed here")
        out.append(p)
    return out


def _input_url_refusal(field: str, data: Any) -> RepositoryRefused | None:
    """The scheme refusal of the input URL at ``field`` (``actions.A.inputs[I].url``)."""
    match = _INPUT_URL.fullmatch(field)
    if match is None:
        return None
    action = data["actions"].get(match["action"], {})
    inputs = action.get("inputs") if isinstance(action, dict) else None
    index = int(match["index"])
    url = inputs[index].get("url") if isinstance(inputs, list) and index < len(inputs) \
        and isinstance(inputs[index], dict) else None
    return scheme_refusal(url) if isinstance(url, str) else None


_INPUT_URL = re.compile(r"actions\.(?P<action>[^.]+)\.inputs\[(?P<index>\d+)\]\.url")


def _action_problems(doc: Document, name: str, a: dict, environment: EnvironmentPolicy,
                     repositories: RepositoryPolicy | None = None) -> list[Problem]:
    """Cross-field rules the schema cannot say well (docs/actions.md, "Rules")."""
    base = ("actions", name)
    out: list[Problem] = []
    t = a.get("type")
    try:
        at = action_type(t) if isinstance(t, str) else None
    except KeyError:
        at = None
    res = a.get("resources") if isinstance(a.get("resources"), dict) else {}
    gpus = res.get("gpus", 0)
    if "gpuClass" in res and not (isinstance(gpus, int) and gpus >= 1):
        out.append(doc.problem(base + ("resources", "gpuClass"), "gpuClass needs gpus of at least 1"))
    if at is not None:
        if at.family == "reconciled-service" and "wallTimeSeconds" in res:
            out.append(doc.problem(base + ("resources", "wallTimeSeconds"),
                                   f"services ({at.name}) run until stopped; wallTimeSeconds is for jobs only", key=True))
        if at.environment != "slurm" and "nodes" in res:
            out.append(doc.problem(base + ("resources", "nodes"), "nodes is for slurm-job only", key=True))
    runtime = a.get("runtime") if isinstance(a.get("runtime"), dict) else {}
    env = runtime.get("environment") if isinstance(runtime.get("environment"), dict) else {}
    for key in env:
        if isinstance(key, str) and (entry := environment.forbidding(key)):
            out.append(doc.problem(base + ("runtime", "environment", key),
                                   f"{key} is forbidden by the Site's environment policy "
                                   f"({entry}; docs/actions.md, Environment)", key=True))
    wd = runtime.get("workingDirectory")
    if isinstance(wd, str) and (why := relative_path_problem(wd)):
        out.append(doc.problem(base + ("runtime", "workingDirectory"), why))
    inputs = a.get("inputs") if isinstance(a.get("inputs"), list) else []
    seen_names: dict[str, int] = {}
    for i, inp in enumerate(inputs):
        if not isinstance(inp, dict):
            continue
        at_path = base + ("inputs", i)
        has_branch, has_commit = "branch" in inp, "commit" in inp
        if has_branch == has_commit:
            out.append(doc.problem(at_path, "an input names exactly one of branch or commit"))
        if isinstance(inp.get("branch"), str) and (why := branch_problem(inp["branch"])):
            out.append(doc.problem(at_path + ("branch",), why))
        if isinstance(inp.get("path"), str) and (why := relative_path_problem(inp["path"])):
            out.append(doc.problem(at_path + ("path",), why))
        # A refused transport is already said at this line (_retitle).
        if repositories is not None and isinstance(inp.get("url"), str) \
                and scheme_refusal(inp["url"]) is None:
            try:
                repositories.check(inp["url"])
            except RepositoryRefused as refused:
                out.append(doc.problem(at_path + ("url",), f"{refused.message} ({refused.code})"))
        n = inp.get("name")
        if isinstance(n, str):
            if n in seen_names:
                out.append(doc.problem(at_path + ("name",), f"input name {n!r} is already used by inputs[{seen_names[n]}]"))
            seen_names.setdefault(n, i)
    model = a.get("model") if isinstance(a.get("model"), dict) and t == "k8s-inferenceservice" else None
    if model is not None:
        mpath = base + ("model",)
        if ("id" in model) == ("path" in model):
            out.append(doc.problem(mpath, "a model names exactly one of id (Hugging Face) or path (in the checkout)"))
        if "revision" in model and "id" not in model:
            out.append(doc.problem(mpath + ("revision",), "revision goes with id"))
        if isinstance(model.get("path"), str) and (why := relative_path_problem(model["path"])):
            out.append(doc.problem(mpath + ("path",), why))
    return out
