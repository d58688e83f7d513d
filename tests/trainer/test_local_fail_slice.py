"""End to end: an elastic run whose optional slice fails at every start ends with exit 8
(core/exit_codes.INTERRUPTED_WITHOUT_PROGRESS) within N attempts without progress, naming what ended them (issue
43, case b).

One `python -m trainer.local` run (real Ray Train, real MaxText's tiny model on CPU), elastic 1..2 fake v6e 2x2
slices (one host each), `--fail-slice-from 3`: from step 3 on, each worker group that holds the last slice loses
its host by SIGTERM with no drain as it starts or in its first step (Ray: "received SIGTERM"), as a host failing
at every start of a slice looks on GKE (KubeRay deletes the whole replica group and recreates its pods). One
host per slice: what is counted (group sizes, steps) does not depend on hosts per slice, and the run costs about
60 % of the same run on 2-host 2x4 slices (276 s alone against 419-457 s); a sibling host of a lost replica
group is played by the e2e run (tests/trainer/test_local_e2e.py). Between the failures Ray's elastic
policy re-forms the group on the minimum, one slice, which trains new steps until the slice's pods are back (the
harness returns them once the minimum has trained a new step: trainer/local/run.py), then grows into the broken
slice again. The watchdog counts attempts per group size (trainer/watchdog.py), so the 2-slice group's N attempts
in a row without a new step end the run although the minimum advances between them; N is 2 here
(`--attempts-without-progress`), the least that shows the count surviving the minimum's progress. The failure
budget is 0: a SIGTERM charged as a failure would end the run with exit 1 instead.
Five worker-group starts (full, minimum, full, minimum, full) and the cluster's, about 5 minutes on 2 cores.
A loss while the group starts (its launch) is counted like one in its first step (trainer/watchdog.py
`scheduling_ended`; seen here: the third full group died so) and leaves nothing reserved for the next group
(trainer/failed_launch.py). No
notice's grace to meet (every loss is a SIGTERM without a drain), so in the suite it is made while the e2e run
holds its slice's capacity away (tests/local_runs.py `fits_in_a_hold`).
"""
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("maxtext")
pytest.importorskip("ray.train")

from core import exit_codes  # noqa: E402
from tests import local_runs  # noqa: E402

STEPS = 400            # never reached: the run ends long before
FAIL_FROM = 3
CHECKPOINT_PERIOD = 5
N = 2
TOPOLOGY = "2x2"          # v6e-4: one host of 4 chips per slice
FULL, MINIMUM = 2, 1      # workers (one per host) of the 2-slice group and of the minimum
# trainer.local's --timeout: about 3x the run on 2 loaded cores (419-457 s measured alone, load 4-20).
TIMEOUT_S = 1500
# A wait with no group running (a group's shutdown and the next one's placement) lasts seconds here; bounding it
# ends a run whose starts keep timing out (the failed launch's leaked placement group, trainer/failed_launch.py,
# seen here before it was fixed) with exit 7 and its line, instead of at TIMEOUT_S.
CAPACITY_WAIT_S = 300


def _start(work: Path):
    run = local_runs.run_trainer_local([
        "--topology", TOPOLOGY, "--elastic", "1,2", "--fail-slice-from", str(FAIL_FROM), "--attempts-without-progress", str(N),
        "--capacity-wait", str(CAPACITY_WAIT_S),
        "--steps", str(STEPS), "--checkpoint-period", str(CHECKPOINT_PERIOD), "--max-failures", "0",
        "--workdir", str(work / "run"), "--json", str(work / "out.json")], TIMEOUT_S, work / "logs")
    return run, work


# Started in the background once the session is collected (tests/local_runs.py), inside the e2e run's hold.
RUN = local_runs.plan("fail-slice", __name__, _start, TIMEOUT_S, fits_in_a_hold=True)


@pytest.fixture(scope="module")
def failing_slice_run():
    run, work = RUN.result()
    from trainer import progress

    out = work / "out.json"
    records = progress.read(work / "run" / "progress")
    driver_log = (work / "run" / "driver.log").read_text(errors="replace")
    return run, json.loads(out.read_text()) if out.exists() else None, records, driver_log


def test_it_ends_with_exit_8_naming_what_ended_the_attempts(failing_slice_run):
    run, result, _, driver_log = failing_slice_run
    assert run.returncode == exit_codes.INTERRUPTED_WITHOUT_PROGRESS, run.describe()
    assert result["driver_exit_code"] == exit_codes.INTERRUPTED_WITHOUT_PROGRESS
    # The driver's lines are wrapped within 100 columns: read them as one text.
    flat = " ".join(driver_log.split())
    ended = re.search(rf"ending the run \(interrupted without progress \(watchdog\)\): {N} attempts of the "
                      rf"{FULL}-worker group in a row trained no step after step \d+ \(limit {N}, "
                      r"core/run_bounds.py\): each ended by (.*?) x(\d+)", flat)
    assert ended, run.describe()
    assert "received SIGTERM" in ended.group(1) and int(ended.group(2)) == N, ended.group(0)
    # Never charged as failures: the failure budget is 0, so one would have ended the run with exit 1 instead.
    assert "retried, not counted as a failure" in driver_log


def test_it_trained_on_its_minimum_between_and_ended_within_n_attempts(failing_slice_run):
    run, _, records, _ = failing_slice_run
    assert run.returncode == exit_codes.INTERRUPTED_WITHOUT_PROGRESS, run.describe()
    attempts = [(r["attempt"], r["workers"]) for r in records if r.get("event") == "attempt"]
    full_size = [attempt for attempt, workers in attempts if workers == FULL]
    # The first full-size group progressed; the next N, each dying as it started or in its first step, ended the run.
    assert len(full_size) == 1 + N, attempts
    # Before each of those N, the minimum (one slice) it grew from trained a step no group had trained
    # before it: the run advanced between the failures, and the full group's count still ended it.
    for full in full_size[1:]:
        grown_from = [attempt for attempt, workers in attempts[:attempts.index((full, FULL))]
                      if workers == MINIMUM][-1]
        first = next(i for i, r in enumerate(records) if r.get("attempt") == grown_from)
        before = max(r["step"] for r in records[:first] if r.get("event") == "step")
        own = [r["step"] for r in records if r.get("event") == "step" and r["attempt"] == grown_from]
        assert own and max(own) > before, (grown_from, before, own)
    steps = [r for r in records if r.get("event") == "step"]
    redone = len(steps) - len({r["step"] for r in steps})
    assert redone <= N * CHECKPOINT_PERIOD, redone


@pytest.mark.parametrize("ok, driver, expected", [
    (True, 0, 0), (False, 0, 1),                      # stopped short of its target: a plain failure
    (False, exit_codes.INTERRUPTED_WITHOUT_PROGRESS, 8), (False, exit_codes.NO_PROGRESS, 7),
    (False, 130, 130), (False, 1, 1), (False, 99, 1),
])
def test_trainer_local_exits_with_the_driver_s_own_code(ok, driver, expected):
    """So `python -m trainer.local --fail-slice-from ...` ends with exit 8 itself, as the RayJob's driver does."""
    from trainer.local.run import local_exit_code

    assert local_exit_code(ok, driver) == expected
