"""The backend is chosen by name once (workloads/backends.py) and asked everywhere else: no caller outside the
registry and the config rules (which say which keys apply to which backend) branches on the name."""
from __future__ import annotations

import re

import pytest

from infra.config import build
from infra.config.schema import KEYS_BY_NAME
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, REPO
from workloads.backends import BACKENDS, backend_for, run_name

# A comparison of something named *backend with a string literal (or a tuple of them).
NAME_BRANCH = re.compile(r"backend\w*[\"'\]]*\s*(==|!=|\bin\b|\bnot in\b)\s*[\(\[{]?\s*[\"']", re.IGNORECASE)
ALLOWED = ("workloads/backends.py", "infra/config/")


def _sources():
    for path in sorted(REPO.rglob("*.py")):
        relative = path.relative_to(REPO).as_posix()
        if relative.startswith((".venv/", "tests/")) or "/." in relative:
            continue
        yield relative, path.read_text()


def test_no_branch_on_the_backend_name_outside_the_registry_and_config():
    found = [f"{relative}:{number}: {line.strip()}"
             for relative, text in _sources() if not relative.startswith(ALLOWED)
             for number, line in enumerate(text.splitlines(), 1) if NAME_BRANCH.search(line)]
    assert not found, "\n".join(found)


def test_the_pattern_sees_the_branches_it_forbids():
    for line in ('if config.workload.backend == "rayjob":', "if backend != 'pathways':",
                 'if config.workload.backend in ("jobset", "pathways"):', 'v["workloadBackend"] == "rayjob"'):
        assert NAME_BRANCH.search(line), line
    assert not NAME_BRANCH.search("backend = backend_for(config)")


def test_every_backend_config_accepts_is_registered():
    allowed = set(KEYS_BY_NAME["workloadBackend"].choices)
    assert allowed == set(BACKENDS)


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_the_launched_settings_are_the_backends_run(stack):
    config = build(load_stack_config(stack, REPO))
    backend = backend_for(config)
    settings = backend.maxtext_settings(config)
    assert settings["run_name"] == run_name(config)
    assert settings["steps"] == str(config.workload.train_steps)
