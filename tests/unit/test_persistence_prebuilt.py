"""Prebuilt statements (ADR 0013): one statement per shape, typed parameters, and the
fallback for SQL-expression values."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, Integer, MetaData, Table, Text, func
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB

from metallo.persistence.prebuilt import insert_statement, set_clause, value_params

things = Table(
    "things", MetaData(), Column("id", Text, primary_key=True), Column("n", Integer),
    Column("doc", JSONB),
)


def test_one_statement_per_shape_whatever_the_values_or_their_order():
    a, pa = insert_statement(things, {"id": "a", "n": 1})
    b, pb = insert_statement(things, {"n": 2, "id": "b"})
    assert a is b  # built once for the column names {id, n}
    assert pa == {"v_id": "a", "v_n": 1} and pb == {"v_n": 2, "v_id": "b"}
    c, _ = insert_statement(things, {"id": "c", "n": 3, "doc": {"k": 1}})
    assert c is not a
    sql = str(c.compile(dialect=postgresql.dialect()))
    assert "%(v_doc)s" in sql and "%(v_id)s" in sql and "%(v_n)s" in sql


def test_parameters_are_typed_like_their_columns():
    clause = set_clause(things, ("doc", "n"))
    assert isinstance(clause["doc"].type, JSONB) and isinstance(clause["n"].type, Integer)
    with pytest.raises(KeyError):
        set_clause(things, ("missing",))
    assert value_params({"doc": None}) == {"v_doc": None}


def test_an_expression_value_gets_a_statement_of_its_own():
    stmt, params = insert_statement(things, {"id": "x", "n": func.random()})
    assert params == {}
    assert "random()" in str(stmt.compile(dialect=postgresql.dialect()))
    again, _ = insert_statement(things, {"id": "x", "n": func.random()})
    assert again is not stmt
