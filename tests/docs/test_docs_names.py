"""No stale words: every module (`python -m X`), flag of it, config key, stack export, repository file and page link
that the README, docs/ or scripts/ name exists. A renamed module, a removed flag or key, a moved file fails here."""
from __future__ import annotations

import functools
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from infra.config.schema import KEYS_BY_NAME, NAMESPACE
from tests.conftest import ALL_STACKS, REPO, committed_stack_run

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SCRIPTS = sorted((REPO / "scripts").glob("*.sh"))
TEXTS = DOCS + SCRIPTS
# Top-level directories of this repository: a path starting with one of them names a file of ours.
OUR_DIRS = ("core", "aot", "infra", "workloads", "trainer", "preview", "scripts", "tests", "docs", "benchmarks",
            "worker_env")
# Paths of other repositories that start like ours, as the docs cite them (the repository is named next to them).
FOREIGN_PATHS = {
    "benchmarks/maxtext_trillium_model_configs.py": "MaxText's benchmark configs (AI-Hypercomputer/maxtext)",
    "benchmarks/xla_flags_library.py": "MaxText's XLA flag groups (AI-Hypercomputer/maxtext)",
    "docs/release_notes.md": "MaxText's release notes (AI-Hypercomputer/maxtext)",
}
MODULE = re.compile(r"python3? -m ([a-z_][\w.]*)")
# A flag of a `python -m X` command: the rest of that command on its line, up to a pipe, `&&`, `;` or `#`.
COMMAND = re.compile(r"python3? -m ([a-z_][\w.]*)([^|;&#`\n]*)")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")
CONFIG_KEY = re.compile(rf"{NAMESPACE}:([a-zA-Z]+)|pulumi config set (?:--path )?([a-zA-Z]+)|--set ([a-zA-Z]+)[\[=]")
EXPORT = re.compile(r"pulumi stack output (?:--show-secrets )?(?:--json )?([a-zA-Z]+)")
PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(OUR_DIRS)})/[\w./-]*[\w])")
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)")


def _all_text() -> list[tuple[Path, str]]:
    return [(path, path.read_text()) for path in TEXTS]


def _modules() -> set[str]:
    return {m for _, text in _all_text() for m in MODULE.findall(text)}


@functools.lru_cache(maxsize=None)
def _help(module: str) -> str:
    proc = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, f"python -m {module} --help failed: {proc.stderr[-500:]}"
    return proc.stdout


def _ours(module: str) -> bool:
    return module.split(".")[0] in OUR_DIRS


@pytest.mark.parametrize("module", sorted(_modules()))
def test_every_module_named_exists(module):
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"python -m {module} is named in the docs but no such module exists"
    if spec.submodule_search_locations is not None:       # a package runs its __main__
        assert importlib.util.find_spec(f"{module}.__main__") is not None, f"{module} has no __main__"


def test_every_flag_named_is_accepted_by_its_module():
    stale = []
    for path, text in _all_text():
        for module, rest in COMMAND.findall(text):
            if not _ours(module):
                continue      # other tools' flags (pip, maxtext's train_compile) are theirs to keep
            for flag in FLAG.findall(rest):
                if flag not in ("--help",) and not re.search(rf"(?<![\w-]){re.escape(flag)}\b", _help(module)):
                    stale.append(f"{path.relative_to(REPO)}: python -m {module} {flag}")
    assert not stale, "flags the docs name that the module does not accept:\n" + "\n".join(sorted(set(stale)))


def test_every_config_key_named_exists():
    stale = []
    for path, text in _all_text():
        for groups in CONFIG_KEY.findall(text):
            key = next(g for g in groups if g)
            if key not in KEYS_BY_NAME and not key.isupper():     # KEY, as in `--set KEY=VALUE`, is a placeholder
                stale.append(f"{path.relative_to(REPO)}: {key}")
    assert not stale, "config keys the docs name that the schema does not have:\n" + "\n".join(sorted(set(stale)))


def test_every_stack_output_named_is_exported():
    exported = set().union(*(committed_stack_run(stack).outputs for stack in ALL_STACKS))
    stale = [f"{path.relative_to(REPO)}: {name}" for path, text in _all_text()
             for name in EXPORT.findall(text) if name not in exported]
    assert not stale, "`pulumi stack output` names no stack exports:\n" + "\n".join(sorted(set(stale)))


def test_every_repository_path_named_exists():
    stale = []
    for path, text in _all_text():
        for name in PATH.findall(text):
            name = name.rstrip(".")
            if name in FOREIGN_PATHS or "*" in name or "<" in name:
                continue
            if not (REPO / name).exists():
                stale.append(f"{path.relative_to(REPO)}: {name}")
    assert not stale, "files the docs name that do not exist:\n" + "\n".join(sorted(set(stale)))


def test_every_page_link_resolves():
    stale = [f"{path.relative_to(REPO)}: {target}" for path in DOCS for target in LINK.findall(path.read_text())
             if not target.startswith("http") and not (path.parent / target).resolve().exists()]
    assert not stale, "links to pages that do not exist:\n" + "\n".join(stale)


def test_the_checker_catches_a_stale_name(tmp_path):
    """The patterns find what they are for (so an empty finding above means the docs are clean)."""
    text = ("Run `.venv/bin/python -m infra.plan --graph g.svg`, set `pulumi config set slicez 2`, read "
            "`pulumi stack output noSuchExport` and core/no_such_file.py.")
    assert MODULE.findall(text) == ["infra.plan"] and importlib.util.find_spec("infra.plan") is None
    assert [next(g for g in m if g) for m in CONFIG_KEY.findall(text)] == ["slicez"]
    assert EXPORT.findall(text) == ["noSuchExport"]
    assert PATH.findall(text) == ["core/no_such_file.py"]
