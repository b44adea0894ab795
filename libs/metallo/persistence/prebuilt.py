"""Statements built once and executed with bind parameters (ADR 0013).

SQLAlchemy Core builds a statement from Python objects on every call and then
derives its cache key; on Execution Core's hot paths that construction cost about a
quarter of the service's Python time in the launch benchmark, more than
executing the statements did. The helpers here build each statement shape once —
per table and per set of column names — with named ``bindparam`` placeholders
typed like their columns, so JSON and UUID values are processed as before, and
return it with the parameter dict to execute it with.

Parameter names are ``v_<column>`` for values and ``w_<name>`` for conditions:
neither prefix is a column name of any table here, so SQLAlchemy never takes a
parameter for an extra ``SET`` column. A value that is itself a SQL expression
(``func.now()``, ``col + 1``) cannot be a parameter: such calls fall back to a
statement built for the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from sqlalchemy import Table, bindparam, insert
from sqlalchemy.sql.elements import ClauseElement

#: Distinct statement shapes kept per helper (a shape is a table and column names).
CACHE_SHAPES = 512


def has_expressions(values: Mapping[str, Any]) -> bool:
    """True when some value is a SQL expression rather than a Python value."""
    return any(isinstance(v, ClauseElement) for v in values.values())


def value_params(values: Mapping[str, Any]) -> dict[str, Any]:
    """``{"v_<column>": value}`` for :func:`set_clause` placeholders."""
    return {f"v_{k}": v for k, v in values.items()}


def set_clause(table: Table, keys: tuple[str, ...]) -> dict[str, Any]:
    """``{column: bindparam("v_<column>")}`` typed like ``table``'s columns.

    Raises KeyError for a name that is not a column of ``table``.
    """
    return {k: bindparam(f"v_{k}", type_=table.c[k].type) for k in keys}


@lru_cache(maxsize=CACHE_SHAPES)
def _insert(table: Table, keys: tuple[str, ...], returning: bool):
    stmt = insert(table).values(**set_clause(table, keys))
    return stmt.returning(table) if returning else stmt


def insert_statement(table: Table, values: Mapping[str, Any], *, returning: bool = False):
    """``(INSERT INTO table (keys) VALUES (…) [RETURNING *], params)`` for ``values``."""
    if has_expressions(values):
        stmt = insert(table).values(**values)
        return (stmt.returning(table) if returning else stmt), {}
    return _insert(table, tuple(sorted(values)), returning), value_params(values)
