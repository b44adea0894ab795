"""``labelSelector`` and ``fieldSelector`` query parameters (Kubernetes' string syntax).

Label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``,
``!a``, joined by commas (all must hold). Field selectors: ``=``, ``==``, ``!=`` on the
fields each resource supports (``metadata.name``, ``metadata.namespace`` for every
resource; Pods also ``status.phase``, ``spec.nodeName``). A bad selector is a 400.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from metallo.labs.kubernetes.errors import bad_request

LabelTest = Callable[[Mapping[str, str]], bool]

_KEY = r"[A-Za-z0-9][-A-Za-z0-9_./]*"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*([-A-Za-z0-9_.]*)\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")

MAX_SELECTOR = 4096


def _split_terms(text: str) -> list[str]:
    """Split at commas outside parentheses."""
    terms, depth, cur = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    terms.append("".join(cur))
    return [t for t in terms if t.strip()]


def parse_label_selector(text: str | None) -> LabelTest:
    """A predicate over an object's labels; an empty selector matches everything."""
    if not text:
        return lambda labels: True
    if len(text) > MAX_SELECTOR:
        raise bad_request("labelSelector is too long")
    tests: list[LabelTest] = []
    for term in _split_terms(text):
        if m := _SET.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",") if v.strip()}
            if op == "in":
                tests.append(lambda lab, k=key, v=values: lab.get(k) in v)
            else:
                tests.append(lambda lab, k=key, v=values: lab.get(k) not in v)
        elif m := _EQ.match(term):
            key, op, value = m.group(1), m.group(2), m.group(3)
            if op == "!=":
                tests.append(lambda lab, k=key, v=value: lab.get(k) != v)
            else:
                tests.append(lambda lab, k=key, v=value: lab.get(k) == v)
        elif m := _EXISTS.match(term):
            neg, key = m.group(1) == "!", m.group(2)
            tests.append((lambda lab, k=key: k not in lab) if neg else (lambda lab, k=key: k in lab))
        else:
            raise bad_request(f"unable to parse requirement: {term.strip()!r}")
    return lambda labels: all(t(labels) for t in tests)


FIELDS_BY_PLURAL: dict[str, dict[str, Callable[[dict], str]]] = {
    "pods": {
        "status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
        "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
        "spec.restartPolicy": lambda o: (o.get("spec") or {}).get("restartPolicy", ""),
    },
    "secrets": {"type": lambda o: o.get("type", "")},
    "events": {
        "involvedObject.name": lambda o: (o.get("involvedObject") or {}).get("name", ""),
        "involvedObject.uid": lambda o: (o.get("involvedObject") or {}).get("uid", ""),
        "involvedObject.kind": lambda o: (o.get("involvedObject") or {}).get("kind", ""),
        "reason": lambda o: o.get("reason", ""),
    },
    "namespaces": {"status.phase": lambda o: (o.get("status") or {}).get("phase", "")},
}

_COMMON: dict[str, Callable[[dict], str]] = {
    "metadata.name": lambda o: o["metadata"].get("name", ""),
    "metadata.namespace": lambda o: o["metadata"].get("namespace", ""),
}

_FIELD = re.compile(r"^\s*([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*?)\s*$")


def parse_field_selector(text: str | None, plural: str) -> Callable[[dict], bool]:
    """A predicate over a whole object; an unsupported field is a 400 as in Kubernetes
    (``field label not supported: x``)."""
    if not text:
        return lambda obj: True
    if len(text) > MAX_SELECTOR:
        raise bad_request("fieldSelector is too long")
    fields = {**_COMMON, **FIELDS_BY_PLURAL.get(plural, {})}
    tests: list[Callable[[dict], bool]] = []
    for term in text.split(","):
        if not term.strip():
            continue
        m = _FIELD.match(term)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        field, op, value = m.groups()
        get = fields.get(field)
        if get is None:
            raise bad_request(f'"{field}" is not a known field selector: only "'
                              + '", "'.join(sorted(fields)) + '"')
        if op == "!=":
            tests.append(lambda o, g=get, v=value: g(o) != v)
        else:
            tests.append(lambda o, g=get, v=value: g(o) == v)
    return lambda obj: all(t(obj) for t in tests)
