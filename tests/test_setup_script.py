"""scripts/setup.sh says what it is doing while it runs for minutes: a numbered line per step, a heartbeat while a
step runs, each step's time, and on failure the step that failed with its exit status. Run against stand-ins for
pip and the MaxText installer (the real setup is what CI's `.ci/run` does)."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STUB_PYTHON = """#!/usr/bin/env bash
case "$*" in
  *"-m pip"*) sleep 3; exit "${STUB_PIP_EXIT:-0}" ;;
  *"-m preview.k8s.crd_fetch"*) echo "CRDs not fetched (stub)"; exit "${STUB_FETCH_EXIT:-0}" ;;
  *--version*) echo "Python 3.11.7" ;;
esac
"""


def _sandbox(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    (tmp_path / "scripts" / "install_maxtext.sh").write_text("sleep 1\n")
    (tmp_path / "requirements.txt").write_text("pulumi==3.272.0\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(STUB_PYTHON)
    python.chmod(0o755)
    return python


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    python = _sandbox(tmp_path)
    environment = {"PATH": "/usr/bin:/bin", "PYTHON": str(python), "SETUP_HEARTBEAT_S": "1", **env}
    return subprocess.run(["bash", str(tmp_path / "scripts" / "setup.sh")], capture_output=True, text=True,
                          env=environment, timeout=60)


def test_every_step_is_announced_timed_and_long_ones_keep_talking(tmp_path):
    proc = _run(tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for number in range(1, 7):
        assert any(line.startswith(f"setup [{number}/6] ") for line in lines), proc.stdout
        assert any(line.startswith(f"setup [{number}/6]   done in ") for line in lines), proc.stdout
    assert any(line.startswith("setup [2/6]   still running (") for line in lines), proc.stdout
    assert lines[-2].startswith("setup done in ")
    # The last line names the next command, the README's quick start.
    assert lines[-1].endswith(": .venv/bin/python -m trainer.local"), lines[-1]
    assert all(len(line) <= 100 for line in lines), [line for line in lines if len(line) > 100]


# Stand-in for the venv's Python as scripts/install_maxtext.sh calls it: importing MaxText prints what
# transformers 5 and MaxText 0.2.5 print on import here (lines of 135 and 181 columns).
STUB_IMPORTING_PYTHON = """#!/usr/bin/env bash
case "$*" in
  *"import maxtext"*)
    echo "[transformers] PyTorch was not found. Models won't be available and only tokenizers, configuration and file/data utilities can be used." >&2
    echo "[transformers] DeepseekV32Config got 'key=rope_scaling' in kwargs but hasn't set it as attribute. For RoPE standardization you need to set 'self.rope_parameters' in model's config." >&2
    exit "${STUB_IMPORT_EXIT:-0}" ;;
  *"import sys"*) echo "3.11.7" ;;
esac
exit 0
"""


def _install_maxtext(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    python = tmp_path / "python"
    python.write_text(STUB_IMPORTING_PYTHON)
    python.chmod(0o755)
    return subprocess.run(["bash", str(REPO / "scripts" / "install_maxtext.sh"), str(python)], capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", **env}, timeout=60)


def test_install_maxtext_keeps_the_libraries_import_warnings_out_of_a_good_setup(tmp_path):
    proc = _install_maxtext(tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = (proc.stdout + proc.stderr).splitlines()
    assert "[transformers]" not in proc.stdout + proc.stderr
    assert out == ["install_maxtext: maxtext 0.2.5 ready for 3.11.7"], out


def test_install_maxtext_shows_them_within_100_columns_when_the_import_fails(tmp_path):
    proc = _install_maxtext(tmp_path, STUB_IMPORT_EXIT="1")
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    assert any(line.startswith("[transformers] PyTorch was not found") for line in lines), proc.stderr
    assert lines[-1] == "install_maxtext: maxtext 0.2.5 still does not import"
    assert all(len(line) <= 100 for line in lines), [len(line) for line in lines]


def test_a_failed_step_is_named_with_its_exit_status(tmp_path):
    proc = _run(tmp_path, STUB_PIP_EXIT="3")
    assert proc.returncode == 3
    assert "setup [2/6] failed (exit 3)" in proc.stderr
    assert "setup [3/6]" not in proc.stdout


def test_crds_not_fetched_do_not_fail_the_setup(tmp_path):
    """Offline (no GitHub) the CRD step says so in one line and setup goes on (preview/k8s/crd_fetch.py)."""
    proc = _run(tmp_path, STUB_FETCH_EXIT="1")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = lines.index("CRDs not fetched (stub)")
    assert lines[at - 1].startswith("setup [5/6] pinned CRDs") and lines[at + 1].startswith("setup [5/6]   done in ")
    # Setup's end says what that means for the plans, and the command that fetches them, before the next step.
    done = next(i for i, line in enumerate(lines) if line.startswith("setup done in "))
    said = " ".join(line.removeprefix("setup:").strip() for line in lines[done + 1:-1])
    assert "every offline plan (python -m preview) exits 1" in said, said
    assert ".venv/bin/python -m preview.k8s.crd_fetch" in said and "TPU_MULTISLICE_CRDS=DIR" in said
    assert lines[-1].endswith(": .venv/bin/python -m trainer.local")
    assert all(len(line) <= 100 for line in lines)


def test_fetched_crds_leave_setup_silent_about_them(tmp_path):
    lines = _run(tmp_path).stdout.splitlines()
    assert lines[-2].startswith("setup done in ") and not any("exits 1" in line for line in lines)
