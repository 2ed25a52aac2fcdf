"""The layering of DESIGN.md "Layout": quotas (tenancy) builds on no other app; scheduling and
monitoring build on quotas; portal composes them all, and no app imports portal.

Every module's AST is read (not imported), so an import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """The absolute module names ``path`` imports (``import a.b`` and ``from a.b import c``)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def offending_imports(app: str, forbidden: tuple[str, ...]) -> list[str]:
    found = []
    for path in sorted((ROOT / app).rglob("*.py")):
        for name in sorted(imported_modules(path)):
            if name.split(".")[0] in forbidden:
                found.append(f"{path.relative_to(ROOT)} imports {name}")
    return found


@pytest.mark.parametrize(
    ("app", "forbidden"),
    [
        ("quotas", ("scheduling", "monitoring", "portal")),
        ("scheduling", ("portal",)),
        ("monitoring", ("portal",)),
    ],
)
def test_apps_import_only_the_layers_below_them(app, forbidden):
    assert list((ROOT / app).rglob("*.py")), f"no modules found under {app}/"
    assert offending_imports(app, forbidden) == []


def test_pure_domain_modules_import_no_framework_and_no_edge_module():
    """``*/domain/`` is plain Python: no framework, and of the project only other domain
    modules (``scheduling.domain`` renders with ``quotas.domain.quantity``)."""
    frameworks = ("django", "celery", "kubernetes", "pynvml", "rest_framework", "kombu")
    apps = ("quotas", "scheduling", "monitoring", "portal", "config")
    domains = sorted(ROOT.glob("*/domain"))
    assert {d.parent.name for d in domains} >= {"quotas", "scheduling", "monitoring"}
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for domain in domains
        for path in sorted(domain.rglob("*.py"))
        for name in sorted(imported_modules(path))
        if name.split(".")[0] in frameworks
        or (name.split(".")[0] in apps and name.split(".")[1:2] != ["domain"])
    ]
    assert found == []


def test_the_check_catches_a_forbidden_import(tmp_path):
    # The walk itself must see both import forms, including one inside a function.
    module = tmp_path / "m.py"
    module.write_text("import scheduling.tasks\n\ndef f():\n    from monitoring.models import X\n")
    assert imported_modules(module) >= {"scheduling.tasks", "monitoring.models"}
