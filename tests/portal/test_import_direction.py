"""Dependencies point one way (DESIGN.md "Layout"; issue 30): observe, then decide and act.

    kube, quotas  <  monitoring  <  scheduling  <  portal  <  config

``kube`` (the Kubernetes client edge) imports no app; ``quotas`` (tenancy) imports neither
monitoring, scheduling nor portal; ``monitoring`` (what the cluster uses) neither scheduling nor
portal; ``scheduling`` (shares, desired state, sync) not portal; ``config`` (settings, URLs, the
error mapping of every app) sits on top. A few ``config`` modules are the project's shared
plumbing, imported by the apps (``SHARED``); they must import no app themselves. No module
circles, and the pure ``*/domain/*`` packages import no framework and only other domain modules.

The graph is read from the sources (AST, nothing is imported): every ``import`` and
``from ... import`` anywhere in a module (inside functions too), relative imports resolved,
``from package import module`` counted as the module. Migrations are not part of it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Layer of each top-level package; a module may import its own package and lower layers only.
LAYERS = {"kube": 0, "quotas": 0, "monitoring": 1, "scheduling": 2, "portal": 3, "config": 4}
OPTIONAL = {"api": 3}  # a top-level REST package, composing apps as portal does, if present

# config modules every app may import: project plumbing that imports no app (checked below).
SHARED = {
    "config.api": "the REST building blocks: strict serializers, parsers, renderer, ETags",
    "config.env": "typed environment parsers",
    "config.net": "the client address behind trusted proxies",
}

FRAMEWORKS = ("django", "celery", "kubernetes", "pynvml", "rest_framework", "kombu")

# Known edges against the order, each with its reason. Empty: any entry is a debt to pay.
ALLOWED: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------- the graph


def product_layers(root: Path = ROOT) -> dict[str, int]:
    layers = dict(LAYERS)
    layers.update({name: rank for name, rank in OPTIONAL.items() if (root / name).is_dir()})
    return layers


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Module name → file for every module of ``packages`` under ``root`` (no migrations)."""
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root)
            if "migrations" in rel.parts:
                continue
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _owner(name: str, modules: Mapping[str, Path]) -> str | None:
    """The longest known module that ``name`` is or lies in (None: not ours)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> dict[str, int]:
    """The project modules ``name`` imports → the line of the first import of each."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}

    def add(target: str | None, line: int) -> None:
        if target and target != name:
            found.setdefault(target, line)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(_owner(alias.name, modules), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                full = f"{source}.{alias.name}"
                add(full if full in modules else _owner(source, modules), node.lineno)
    return found


def import_graph(root: Path, packages: Iterable[str]) -> dict[str, dict[str, int]]:
    modules = module_files(root, packages)
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def circles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in graph:
                    continue
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def wrong_way(
    graph: Mapping[str, Mapping[str, int]],
    layers: Mapping[str, int],
    shared: Iterable[str] = (),
) -> list[str]:
    """Imports of a module from its own layer's other packages or a higher layer."""
    shared = set(shared)
    found = []
    for source, targets in sorted(graph.items()):
        mine = source.split(".")[0]
        for target, line in sorted(targets.items()):
            theirs = target.split(".")[0]
            if theirs == mine or (target in shared and source.split(".")[0] != "kube"):
                continue
            if layers[theirs] >= layers[mine]:
                found.append(f"{source} (line {line}) imports {target}")
    return found


def domain_violations(root: Path, layers: Mapping[str, int]) -> list[str]:
    """Framework imports, and imports of non-domain project modules, in ``*/domain/*``."""
    found = []
    for path in sorted(root.glob("*/domain/**/*.py")):
        if path.relative_to(root).parts[0] not in layers:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue  # relative imports stay inside the domain package
            for name in names:
                top, *rest = name.split(".")
                if top in FRAMEWORKS or (top in layers and rest[:1] != ["domain"]):
                    found.append(f"{path.relative_to(root)} (line {node.lineno}) imports {name}")
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    return import_graph(ROOT, product_layers())


# --------------------------------------------------------------------------- the product


def test_the_walk_sees_every_package_and_the_imports_inside_functions(graph):
    assert {name.split(".")[0] for name in graph} == set(product_layers())
    assert not [name for name in graph if ".migrations" in name]
    # Imported inside a function only (the PodGroups of the latest collection).
    assert "monitoring.models" in graph["scheduling.transitions"]
    # A relative import resolves to the module it names.
    assert "kube.client" in graph["kube.apply"]


def test_no_module_circles(graph):
    assert circles(graph) == []


def test_imports_point_down_the_layers(graph):
    found = {_edge(line): line for line in wrong_way(graph, product_layers(), SHARED)}
    assert [line for edge, line in found.items() if edge not in ALLOWED] == []
    assert [edge for edge in ALLOWED if edge not in found] == [], "an allowance no longer needed"


def _edge(line: str) -> tuple[str, str]:
    source, _, target = line.partition(" imports ")
    return source.split(" (line")[0], target


def test_the_shared_config_modules_import_no_app(graph):
    for name in SHARED:
        assert name in graph, f"{name} is not a module"
        apps = sorted(t for t in graph[name] if t.split(".")[0] != "config")
        assert apps == [], f"{name} is shared plumbing but imports {apps}"
        assert [t for t in graph[name] if t.split(".")[0] == "config" and t not in SHARED] == []


def test_kube_imports_no_app(graph):
    assert [
        f"{source} imports {target}"
        for source, targets in sorted(graph.items())
        if source.split(".")[0] == "kube"
        for target in targets
        if target.split(".")[0] != "kube"
    ] == []


def test_pure_domain_modules_import_no_framework_and_no_edge_module():
    """``*/domain/`` is plain Python: no framework, and of the project only other domain
    modules (``scheduling.domain`` renders with ``quotas.domain.quantity``)."""
    assert {p.parent.name for p in ROOT.glob("*/domain")} >= {"quotas", "scheduling", "monitoring"}
    assert domain_violations(ROOT, product_layers()) == []


# --------------------------------------------------------------------------- the checker


def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_checker_catches_a_circle_a_wrong_way_import_and_a_framework_in_a_domain(tmp_path):
    _write(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "from . import b\n",  # low.a → low.b → low.a: a circle
            "low/b.py": "def f():\n    from low.a import thing\n",  # inside a function
            "low/c.py": "def g():\n    import high.views\n",  # against the order
            "low/domain/__init__.py": "",
            "low/domain/pure.py": "from django.db import models\nfrom low import c\n",
            "low/migrations/0001_initial.py": "import high.views\n",  # not walked
            "high/__init__.py": "",
            "high/models.py": "",
            "high/views.py": "",
            "high/pages/__init__.py": "",
            "high/pages/views.py": "from ..models import thing\nfrom low import a\n",
        },
    )
    layers = {"low": 0, "high": 1}
    graph = import_graph(tmp_path, layers)

    assert "low.migrations.0001_initial" not in graph
    assert graph["high.pages.views"] == {"high.models": 1, "low.a": 2}  # relative resolved
    assert circles(graph) == [["low.a", "low.b"]]
    assert wrong_way(graph, layers) == ["low.c (line 2) imports high.views"]
    assert domain_violations(tmp_path, layers) == [
        "low/domain/pure.py (line 1) imports django.db",
        "low/domain/pure.py (line 2) imports low",
    ]


def test_the_checker_refuses_a_sideways_import_on_the_same_layer(tmp_path):
    _write(
        tmp_path,
        {
            "kube/__init__.py": "",
            "kube/client.py": "from quotas.models import Team\n",
            "quotas/__init__.py": "",
            "quotas/models.py": "",
        },
    )
    layers = {"kube": 0, "quotas": 0}
    assert wrong_way(import_graph(tmp_path, layers), layers) == [
        "kube.client (line 1) imports quotas.models"
    ]
