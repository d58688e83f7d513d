"""End to end: an elastic run (1..2 slices) loses a whole slice at step 12 and finishes on the one left.

`python -m trainer.local --elastic 1,2 --kill-slice-at 12` SIGKILLs every process of the second slice's hosts
(trainer/local/cluster.py kill_slice), as a lost Spot slice. Ray Train's elastic policy restarts the group on the
slice that is left (ray/train/v2/_internal/execution/scaling_policy/elastic.py) and MaxText resumes from its last
checkpoint. The scale-up notice actor that rank 0 polls every step (trainer/resize.py) must not be on the lost
slice: before it was pinned to the controller's node, Ray could place it there and the next poll failed the run
with "The actor died because its node has died". A few minutes on 2 cores.
"""
import json
import math
import subprocess
import sys

import pytest

pytest.importorskip("maxtext")
pytest.importorskip("ray.train")

from tests.conftest import REPO  # noqa: E402


def test_elastic_run_survives_losing_a_slice(tmp_path):
    out, work = tmp_path / "out.json", tmp_path / "work"
    proc = subprocess.run([sys.executable, "-m", "trainer.local", "--elastic", "1,2", "--kill-slice-at", "12",
                           "--json", str(out), "--workdir", str(work)],
                          cwd=REPO, capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["steps_completed"] == 30 and math.isfinite(result["final_loss"])
    (failure,) = result["failures"]
    assert failure["kind"] == "slice-lost" and failure["workers_after"] == 2
    assert result["scaling"]["workers_final"] == 2
    driver_log = (work / "driver.log").read_text(errors="replace")
    assert "class_name: ScaleUpNotice" not in driver_log          # the notice actor never died
    assert "notice actor unreachable" not in driver_log           # and rank 0 always reached it
    assert "watchdog: first step within" in driver_log            # the watchdog watched, and let it be
