"""The package layers point one way: core ← infra ← workloads ← __main__; core ← aot ← workloads (the
ahead-of-time compile); core ← trainer; preview → the rest.

Read from the source with `ast` (every import, also those inside functions), so a lazy import cannot hide a
wrong-way edge. What is shipped to the cluster (core/, trainer/ without trainer/local/) imports no Pulumi.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("core", "aot", "infra", "workloads", "trainer", "preview")
# Which project packages each package may import (itself always).
ALLOWED = {
    "core": set(),
    "aot": {"core"},
    "infra": {"core"},
    "workloads": {"core", "aot", "infra"},
    "trainer": {"core"},
    "preview": {"core", "aot", "infra", "workloads"},
    "__main__": {"infra", "workloads"},
}
SHIPPED_FORBIDDEN = ("pulumi", "pulumi_gcp", "pulumi_kubernetes")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> list[Path]:
    files = [REPO / "__main__.py"]
    for package in PACKAGES:
        files += sorted((REPO / package).rglob("*.py"))
    return files


def imports_of(path: Path) -> set[str]:
    """Every module name imported by the file (absolute imports; the project uses no relative ones)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import"
            if node.module:
                names.add(node.module)
                # `from pkg import sub` imports the submodule pkg.sub when there is one.
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def package_of(module: str) -> str:
    return module.split(".")[0]


def project_modules() -> dict[str, Path]:
    return {module_name(path): path for path in source_files()}


def project_graph() -> dict[str, set[str]]:
    modules = project_modules()
    return {name: {m for m in imports_of(path) if m in modules and m != name} for name, path in modules.items()}


def test_packages_import_only_the_layers_below_them():
    wrong = [f"{module} imports {target}" for module, targets in project_graph().items() for target in targets
             if package_of(target) != package_of(module) and package_of(target) not in ALLOWED[package_of(module)]]
    assert wrong == []


def test_trainer_local_is_the_only_part_of_trainer_that_may_import_local_helpers():
    wrong = [f"{module} imports {target}" for module, targets in project_graph().items() for target in targets
             if target.startswith("trainer.local") and not module.startswith("trainer.local")]
    assert wrong == []


def test_the_module_graph_has_no_cycle():
    graph = project_graph()
    # Package __init__ re-exports are edges to their own submodules; a submodule importing its package's
    # __init__ is not a cycle in load order, so only edges between distinct non-package modules count.
    packages = {name for name, path in project_modules().items() if path.name == "__init__.py"}
    edges = {m: {t for t in targets if t not in packages} for m, targets in graph.items() if m not in packages}
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> list[str] | None:
        state[node] = 1
        for target in sorted(edges.get(node, ())):
            if state.get(target) == 1:
                return stack + [node, target]
            if state.get(target) is None and (cycle := visit(target, stack + [node])):
                return cycle
        state[node] = 2
        return None

    for node in sorted(edges):
        if state.get(node) is None:
            cycle = visit(node, [])
            assert cycle is None, " → ".join(cycle)


@pytest.mark.parametrize("path", [p for p in source_files()
                                  if p.relative_to(REPO).parts[0] in ("core", "trainer")
                                  and p.relative_to(REPO).parts[:2] != ("trainer", "local")],
                         ids=lambda p: str(p.relative_to(REPO)))
def test_what_is_shipped_to_the_cluster_never_imports_pulumi(path):
    assert not {m for m in imports_of(path) if package_of(m) in SHIPPED_FORBIDDEN}


def test_the_checker_fails_on_a_wrong_way_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from workloads.common import labels\ndef f():\n    import preview.cli\n")
    assert {"workloads.common", "workloads.common.labels", "preview.cli"} <= imports_of(bad)
