"""What a new user reads first: every command-line tool's --help fits 100 columns and says its description once."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

CLIS = ("trainer.local", "preview", "preview.deployer_roles", "trainer.entrypoint", "trainer.smoke",
        "preview.k8s.crd_fetch")


@pytest.mark.parametrize("module", CLIS)
def test_help_fits_100_columns_and_says_its_description_once(module):
    result = subprocess.run([sys.executable, "-m", module, "--help"], cwd=REPO, capture_output=True, text=True,
                            timeout=120, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    too_wide = [line for line in lines if len(line) > 100]
    assert not too_wide, too_wide
    description = lines[lines.index("") + 1]           # the first line after the usage block
    first_words = " ".join(description.split()[:6])
    assert first_words and result.stdout.count(first_words) == 1, first_words


def test_local_run_help_is_short():
    # At an 80-column terminal (argparse wraps at the terminal's width, at most 100 columns: core/cli_errors.py).
    result = subprocess.run([sys.executable, "-m", "trainer.local", "--help"], cwd=REPO, capture_output=True,
                            text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert len(result.stdout.splitlines()) <= 100     # 135 before, with the description twice
    assert result.stdout.startswith("usage: python -m trainer.local [options]\n")


@pytest.mark.parametrize("module", ["preview"])
def test_run_outside_the_venv_says_how_to_set_up_in_one_line(module):
    """`python -S` has no site-packages: what a Python without the project's requirements sees."""
    result = subprocess.run([sys.executable, "-S", "-m", module, "--stack", "dev"], cwd=REPO, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "bash scripts/setup.sh" in line and f".venv/bin/python -m {module}" in line and len(line) <= 100


def test_local_run_says_what_each_injected_failure_plays_in_one_place():
    # The injected failures are explained by their --help only; the module docstring shows examples and points there.
    import trainer.local.run as run
    group = next(g for g in run.build_parser()._action_groups if g.title == "injected failures")
    flags = [action.option_strings[0] for action in group._group_actions]
    assert {"--fail-at", "--kill-slice-at", "--preempt-slice-at", "--add-slice-at"} <= set(flags)
    assert all(action.help for action in group._group_actions)
    explained = [line for line in run.__doc__.splitlines() if line.lstrip().startswith("--")]
    assert not explained, explained
