"""End to end: an elastic run starts on one slice and grows to two through the code path the cluster uses.

`python -m trainer.local --elastic 1,2 --start-slices 1 --add-slice-at 5 --steps 80` (about 7 minutes on 2 cores):
the local Ray cluster starts with one fake v6e 2x4 slice, as the RayJob's cluster does with replicas =
elasticMinSlices (tests/workloads/test_ray_elastic_start.py plays KubeRay's Ready rule on it). The driver, `python
-m trainer.entrypoint` as on the head, asks for both slices with trainer/grow.py's PATCH of its RayCluster; here the
API server and KubeRay are trainer/local/kuberay.py's stand-in, reached over HTTP with the same request. After step
5 capacity arrives for the slices the RayCluster wants, and only those: had the driver not asked, the run would
stay on one slice. Ray Train's elastic policy then re-forms the worker group on both slices (after a save,
trainer/resize.py) and the run ends with 4 workers.
"""
import json
import math

import pytest

pytest.importorskip("maxtext")
pytest.importorskip("ray.train")

from core.ray_cluster import grow_patch  # noqa: E402
from tests.conftest import run_trainer_local  # noqa: E402

STEPS = 80   # the growth takes Ray Train some 40 steps to notice on 2 loaded cores (docs/measurements.md)
TIMEOUT_S = 1500     # trainer.local's --timeout: about 3x the run on 2 cores with other work beside it


@pytest.fixture(scope="module")
def grow_run(tmp_path_factory):
    logs = tmp_path_factory.mktemp("grow")
    run = run_trainer_local(["--elastic", "1,2", "--start-slices", "1", "--add-slice-at", "5", "--steps", str(STEPS),
                             "--json", str(logs / "out.json")], TIMEOUT_S, logs)
    assert run.returncode == 0, run.describe()
    return json.loads((logs / "out.json").read_text()), run.stdout


def test_the_driver_asked_kuberay_for_both_slices(grow_run):
    result, stdout = grow_run
    assert result["kuberay_patches"] == [grow_patch(2)]
    assert "the driver patched its RayCluster (TPU group replicas -> 2); KubeRay now wants 2 slice(s)" in stdout


def test_training_started_on_one_slice_and_ended_on_two(grow_run):
    result, stdout = grow_run
    assert result["steps_completed"] == STEPS and math.isfinite(result["final_loss"])
    assert "2 workers (1 slices)" in stdout
    (added,) = result["failures"]
    assert added["kind"] == "slice-added" and added["at_step"] >= 5
    assert added["workers_after"] == 4 and result["scaling"]["workers_final"] == 4
    assert result["attempts"] >= 2
