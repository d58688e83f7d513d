"""Every command-line tool of the project refuses bad input in one line per mistake, exit status 2, with no usage
block and no traceback (core/cli_errors.py)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# (module, arguments that must be refused)
BAD_INPUT = [
    ("trainer.local", ["--slices", "0"]),
    ("trainer.local", ["--no-such-flag"]),
    ("trainer.local", ["--steps", "3", "--fail-at", "5"]),
    ("trainer.entrypoint", ["--steps", "zero"]),
    ("trainer.entrypoint", ["--set", "learning_rate"]),
    ("trainer.compat", ["--no-such-flag"]),
    ("preview", ["--stack"]),
    ("preview", ["--stack", "prod", "--set", "slices=0"]),
    # A misspelt key (107 columns) and a key the backend never reads: within 100 columns.
    ("preview", ["--stack", "dev", "--set", "slice=3"]),
    ("preview", ["--stack", "dev", "--set", "pathwaysTrainerImage=us-docker.pkg.dev/cloud-tpu-images/maxtext-images/"
                 "tpu_pre_training:0.2.4"]),
    ("preview.compile", ["--calibrate", "--model", "tiny"]),
    ("preview.deployer_roles", ["--no-such-flag"]),
    ("preview.docs_tables", ["--no-such-flag"]),
    ("preview.runs", ["--cluster-stack", "team", "--stacks", "team-8b", "--now", "noon", "--recorded", "."]),
    ("preview.k8s.crd_fetch", ["--timeout", "soon"]),
    ("trainer.smoke", ["--expect-devices", "many"]),
    ("infra.config.docs", ["--no-such-flag"]),
]


def test_scripts_refuse_bad_flags_in_one_line():
    proc = subprocess.run([sys.executable, "scripts/libtpu_flag_check.py", "--no-such-flag"], cwd=REPO,
                          capture_output=True, text=True, timeout=300, env={"PATH": "/usr/bin:/bin"})
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len([line for line in lines if not line.startswith(" ")]) == 1, proc.stderr
    assert all(len(line) <= 100 for line in lines), proc.stderr


@pytest.mark.parametrize("module, argv", BAD_INPUT, ids=[f"{m} {' '.join(a)}" for m, a in BAD_INPUT])
def test_bad_input_is_one_line_exit_2(module, argv):
    proc = subprocess.run([sys.executable, "-m", module, *argv], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={"JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin"})
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr
    # One mistake, one refusal: a long one goes on over indented lines, every line within 100 columns.
    assert len([line for line in lines if not line.startswith(" ")]) == 1, proc.stderr
    assert all(len(line) <= 100 for line in lines), proc.stderr
    assert "usage:" not in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == "", proc.stdout
