"""Least-squares linear regression with the standard library only.

The dataset is a CSV file with a header; the last column is the target. Rows
are split deterministically: every fifth row (index % 5 == 4) is held out for
evaluation, the others train the model.
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path


def read_dataset(path: str) -> tuple[list[str], list[list[float]], list[float]]:
    """(feature names, feature rows, targets) from a CSV file whose last column is the target."""
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader)
        rows, targets = [], []
        for line_no, record in enumerate(reader, start=2):
            if len(record) != len(header):
                raise ValueError(f"{path}:{line_no}: expected {len(header)} values")
            values = [float(v) for v in record]
            rows.append(values[:-1])
            targets.append(values[-1])
    if not rows:
        raise ValueError(f"{path}: no data rows")
    return header[:-1], rows, targets


def split(rows: list, targets: list, held_out: bool) -> tuple[list, list]:
    """Training rows (held_out=False) or evaluation rows (held_out=True)."""
    pick = [i for i in range(len(rows)) if (i % 5 == 4) == held_out]
    return [rows[i] for i in pick], [targets[i] for i in pick]


def solve(matrix: list[list[float]], vector: list[float]) -> list[float]:
    """Solve matrix · x = vector by Gaussian elimination with partial pivoting."""
    n = len(vector)
    a = [row[:] + [vector[i]] for i, row in enumerate(matrix)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(a[r][col]))
        if abs(a[pivot][col]) < 1e-12:
            raise ValueError("the normal equations are singular (collinear features?)")
        a[col], a[pivot] = a[pivot], a[col]
        for r in range(col + 1, n):
            factor = a[r][col] / a[col][col]
            for c in range(col, n + 1):
                a[r][c] -= factor * a[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][c] * x[c] for c in range(r + 1, n))) / a[r][r]
    return x


def fit(rows: list[list[float]], targets: list[float]) -> tuple[list[float], float]:
    """(weights, bias) minimising the squared error (normal equations with an intercept)."""
    design = [row + [1.0] for row in rows]
    k = len(design[0])
    xtx = [[sum(d[i] * d[j] for d in design) for j in range(k)] for i in range(k)]
    xty = [sum(d[i] * t for d, t in zip(design, targets, strict=True)) for i in range(k)]
    coefficients = solve(xtx, xty)
    return coefficients[:-1], coefficients[-1]


def predict(model: dict, row: list[float]) -> float:
    return sum(w * v for w, v in zip(model["weights"], row, strict=True)) + model["bias"]


def metrics(model: dict, rows: list[list[float]], targets: list[float]) -> dict:
    """Mean squared error, RMSE, mean absolute error and R² on ``rows``."""
    errors = [predict(model, r) - t for r, t in zip(rows, targets, strict=True)]
    mse = sum(e * e for e in errors) / len(errors)
    mean = sum(targets) / len(targets)
    total = sum((t - mean) ** 2 for t in targets)
    return {"rows": len(rows), "mse": round(mse, 6), "rmse": round(math.sqrt(mse), 6),
            "mae": round(sum(abs(e) for e in errors) / len(errors), 6),
            "r2": round(1 - sum(e * e for e in errors) / total, 6) if total else None}


def write_json(path: str, value: dict) -> None:
    Path(path).write_text(json.dumps(value, indent=2, sort_keys=True) + "\n", encoding="utf-8")
