"""End to end: `python -m trainer.local --fail-at 12` on fake TPU slices with real Ray Train and real MaxText.

One run (a few minutes on 2 cores): 2 x v6e 2x4 slices, 30 steps, checkpoint every 5, one training worker
SIGKILLed after step 12. Ray Train must restart the worker group and MaxText resume from its checkpoint.
"""
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("maxtext")
pytest.importorskip("ray.train")

REPO = Path(__file__).resolve().parents[2]
CHECKPOINT_PERIOD = 5     # trainer.local's default


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("local") / "out.json"
    proc = subprocess.run([sys.executable, "-m", "trainer.local", "--fail-at", "12", "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout


def test_target_reached_with_finite_loss(local_run):
    result, _ = local_run
    assert result["steps_completed"] == result["target_steps"] == 30
    assert math.isfinite(result["final_loss"])
    assert result["maxtext_version"] == "0.2.5"


def test_same_tpu_scaling_config_as_on_gke(local_run):
    result, _ = local_run
    assert result["scaling"]["use_tpu"] is True
    assert result["scaling"]["workers"] == 4 and result["scaling"]["slices"] == 2
    assert result["scaling"]["topology"] == "2x4" and result["scaling"]["accelerator_type"] == "TPU-V6E"


def test_failure_recovered_from_checkpoint(local_run):
    result, _ = local_run
    (failure,) = result["failures"]
    assert failure["kind"] == "worker-killed" and failure["at_step"] >= 12
    assert failure["recovery_s"] > 0
    assert 0 <= failure["steps_redone"] <= CHECKPOINT_PERIOD
    assert result["attempts"] >= 2
    assert 0 < result["goodput"] < 1 and result["wall_s"] > 0


def test_progress_and_summary_are_shown(local_run):
    _, stdout = local_run
    assert "model check: MaxText built" in stdout
    assert "injected failure: worker-killed" in stdout
    assert "goodput" in stdout
