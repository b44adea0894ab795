"""``libs/metallo`` is shared by every service and the CLI: it imports no service
package (DESIGN.md, Layers). A scan of every module's import statements (and of
``importlib.import_module("…")`` calls with a literal name) finds none."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBS = ROOT / "libs" / "metallo"
SERVICES = frozenset(p.name for p in (ROOT / "services").iterdir()
                     if (p / "__init__.py").exists())


def imported_modules(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, module) of every absolute import and literal ``import_module`` call."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", ""))
              == "import_module" and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            found.append((node.lineno, node.args[0].value))
    return found


def service_imports(path: Path) -> list[str]:
    """``file:line: module`` for each import of a service package in ``path``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [f"{path.relative_to(ROOT)}:{line}: {module}"
            for line, module in imported_modules(tree) if module.split(".")[0] in SERVICES]


def test_the_services_are_known():
    assert {"execution_core", "site_coordination", "site_runtime"} <= SERVICES


def test_the_scan_sees_a_service_import(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom site_coordination.domain import errors\n"
                      "def f():\n    import execution_core.adaptors\n"
                      "    importlib.import_module('site_runtime.worker')\n"
                      "from metallo.site_coordination.v1 import site_coordination_pb2\n")
    tree = ast.parse(sample.read_text())
    modules = [m for _line, m in imported_modules(tree) if m.split(".")[0] in SERVICES]
    assert modules == ["site_coordination.domain", "execution_core.adaptors", "site_runtime.worker"]


def test_libs_metallo_imports_no_service_package():
    offenders = [hit for path in sorted(LIBS.rglob("*.py")) for hit in service_imports(path)]
    assert not offenders, "libs/metallo imports a service package:\n" + "\n".join(offenders)
