"""A service, a selector or a helper of `automation` or of the worker wing (`worker`) is imported
from the module that defines it: no module re-exports another's names, so there is one way to
import each, and the wing's modules are in `worker/` alone (no shim left where they were).

`automation.models` is the one exception: Django reads an app's models from its `models`
module, which gathers each concern's (docs/architecture.md#the-concerns-inside-automation).
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.packages import root_packages

REPO = Path(__file__).resolve().parents[1]
GATHERED = {"automation.models"}
CHECKED = ("automation.", "worker.")
# Where the wing's modules were before it was one package: nothing may stand there again.
MOVED = (
    "core/broker.py",
    "core/dispatch.py",
    "automation/pipeline/calls.py",
    "automation/checks.py",
    "automation/management/commands/qcluster.py",
)


def _module_file(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.exists():
            return candidate
    return None


def _defined(path: Path) -> set[str]:
    """The names a module defines itself at its top level (not those it imports)."""
    names: set[str] = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                parts = target.elts if isinstance(target, ast.Tuple) else [target]
                names |= {t.id for t in parts if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _sources() -> list[Path]:
    found = [
        p
        for package in (*root_packages(), "tests", "bench")
        for p in (REPO / package).rglob("*.py")
    ]
    return [p for p in found if "migrations" not in p.parts]


def reexported_imports(paths: list[Path]) -> list[str]:
    """Each `from automation.x import name` (or `worker.x`) whose module does not define `name`
    itself."""
    wrong = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.ImportFrom) or node.level or node.module is None:
                continue
            if not node.module.startswith(CHECKED) or node.module in GATHERED:
                continue
            target = _module_file(node.module)
            if target is None:
                continue
            defined = _defined(target)
            for alias in node.names:
                submodule = _module_file(f"{node.module}.{alias.name}")
                if alias.name not in defined and submodule is None:
                    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
                    wrong.append(f"{where}:{node.lineno} {node.module}.{alias.name}")
    return wrong


def test_every_automation_name_is_imported_from_where_it_is_defined() -> None:
    assert reexported_imports(_sources()) == []


def test_the_check_finds_a_name_imported_through_another_module(tmp_path: Path) -> None:
    # automation.intake.services imports record_audit from the run's journal.
    source = tmp_path / "uses.py"
    source.write_text(
        "from automation.intake.services import intake_submit, record_audit\n"
        "from automation.runs.journal import record_audit as said\n",
        encoding="utf-8",
    )
    (found,) = reexported_imports([source])
    assert found.endswith("automation.intake.services.record_audit")


def test_the_worker_wing_left_no_module_where_it_was() -> None:
    assert [path for path in MOVED if (REPO / path).exists()] == []
