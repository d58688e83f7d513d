"""trainer.pathways_run: the Pathways head's MaxText exits with core/exit_codes.py instead of MaxText's 1 for every
error, so the Pathways JobSet's NotRetryableExit rule (workloads/failure_policy.py) can end a run no retry fixes."""
from __future__ import annotations

import importlib.resources
import os
import subprocess
import sys

from core import exit_codes
from tests.conftest import REPO


def _run(argv: list[str], tmp_path, **env) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "JAX_"))}
    environment.update(JAX_PLATFORMS="cpu", **env)
    return subprocess.run([sys.executable, "-m", "trainer.pathways_run", *argv], cwd=REPO, env=environment,
                          capture_output=True, text=True, timeout=300)


def test_a_setting_maxtext_refuses_exits_config_error(tmp_path):
    base = str(importlib.resources.files("maxtext") / "configs" / "base.yml")
    result = _run([base, "per_device_batch_size=notanumber", "skip_jax_distributed_system=True", "hardware=cpu",
                   "run_name=bad", f"base_output_directory={tmp_path}"], tmp_path)
    assert result.returncode == exit_codes.CONFIG_ERROR, result.stderr[-2000:]
    assert "per_device_batch_size" in result.stderr


def test_an_image_without_maxtexts_trainer_exits_import_error(tmp_path):
    # A `maxtext` package that has no trainers module stands in for an image built without MaxText's trainer.
    (tmp_path / "maxtext").mkdir()
    (tmp_path / "maxtext" / "__init__.py").write_text("")
    result = _run(["base.yml"], tmp_path, PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    assert result.returncode == exit_codes.IMPORT_ERROR, result.stderr[-2000:]


def test_no_arguments_is_a_config_error(tmp_path):
    assert _run([], tmp_path).returncode == exit_codes.CONFIG_ERROR
