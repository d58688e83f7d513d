"""End to end: the local run on text files the test writes, tokenized by a tokenizer MaxText ships.

Two runs of `python -m trainer.local` (a few minutes each on 2 cores), model `tiny-text` (the CPU test model with
the Llama 2 vocabulary; MaxText tokenizes with its own assets/tokenizers/tokenizer.llama2), 30 steps, checkpoint
every 5, data shuffling off so that the records read can be checked against the file. `--trace-data` records,
per batch and host, Grain's position and the first tokens of each row; each document starts "record NNNNN:",
so the decoded tokens name the record (trainer/local/tiny_data.py).

- Run A, ArrayRecord text, elastic 1..2 slices, `--kill-slice-at 12`: one slice lost mid-epoch (every process of
  its hosts SIGKILLed, trainer/local/cluster.py kill_slice), Ray Train's elastic policy re-forms the group on the
  slice left (ray/train/v2/_internal/execution/scaling_policy/elastic.py), the run goes on with 2 hosts instead
  of 4 and restores Grain's global position from one host's file
  (trainer/maxtext_runtime.py install_elastic_grain_restore); the scale-up notice actor lives through the loss. Checked: every batch holds exactly the records its
  position names; the batches of the run's history (each attempt up to where the next one resumed) cover
  records 0..N-1 once each, none skipped or repeated; only the steps since the last checkpoint are read again,
  with the same records; the loss falls.
- Run B, a new run from run A's parameters saved at step 25 (`--load-parameters-path`), on Parquet text as it is
  (no conversion step): the file holds the records run A had not read at step 25 (the position its checkpoint
  saved), on one slice as run A had then, with packing off as elastic runs have it, so B's first batch is run
  A's batch of step 26, row for row on the same hosts. `--fail-at 12`: one worker SIGKILLed, the group restarts
  and MaxText restores the model and each host's Parquet position. Checked: B's first loss equals run A's loss at
  step 26 (the same weights on the same batch; docs/trainer.md: equal up to float32 summation order, 1e-4 here);
  the steps trained again after the restore read exactly the rows they read the first time, on every host; the
  records of B's history are its file's first records, each once; B reaches its target.
"""
import json
import math
import re
from collections import defaultdict
from pathlib import Path

import pytest

pytest.importorskip("maxtext")
pytest.importorskip("ray.train")

from tests import local_runs  # noqa: E402

STEPS = 30
# trainer.local's --timeout: about 3x what a run takes on 2 cores with other work beside it (docs/development.md).
TIMEOUT_S = 1500
CHECKPOINT_PERIOD = 5     # trainer.local's default
COMMON = ["--model", "tiny-text", "--dataset-type", "grain", "--trace-data", "--set", "grain_worker_count=0",
          "--set", "enable_data_shuffling=false"]


def _run(workdir: Path, argv: list[str]) -> tuple[dict, str]:
    out = workdir / "out.json"
    run = local_runs.run_trainer_local([*COMMON, *argv, "--workdir", str(workdir), "--json", str(out)], TIMEOUT_S,
                                       workdir)
    assert run.returncode == 0, run.describe()
    return json.loads(out.read_text()), run.stdout


LOADED_STEP = 25          # one of the 3 checkpoints run A keeps (20, 25, 29)


def _start(work: Path):
    """Run A, then run B from A's parameters at LOADED_STEP (both, or the first failure)."""
    from trainer.local import tiny_data

    workdir_a = work / "run-a"
    pattern = tiny_data.write_text_arrayrecord(workdir_a / "data")
    result_a, stdout_a = _run(workdir_a, ["--dataset-path", pattern, "--elastic", "1,2", "--kill-slice-at", "12"])
    checkpoint = workdir_a / "output" / "local" / "checkpoints" / str(LOADED_STEP)
    (position_file,) = (checkpoint / "iter").glob("process_0-of-*.json")
    first = json.loads(position_file.read_text())["global_next_index"]
    workdir_b = work / "run-b"
    pattern = tiny_data.write_text_parquet(workdir_b / "data", first=first)
    result_b, stdout_b = _run(workdir_b, ["--dataset-path", pattern, "--run-name", "from-a", "--slices", "1",
                                          "--set", "packing=false", "--fail-at", "12",
                                          "--load-parameters-path", str(checkpoint / "items")])
    return (workdir_a, result_a, stdout_a), (workdir_b, result_b, stdout_b, first)


# Started in the background once the session is collected (tests/local_runs.py); two runs, one after the other.
# Neither meets a deadline of seconds (their losses are SIGKILLs, no notice), so they are made while the e2e run
# holds its slice's capacity away.
RUNS = local_runs.plan("data", __name__, _start, 2 * TIMEOUT_S, runs=2, fits_in_a_hold=True)


@pytest.fixture(scope="module")
def run_a():
    return RUNS.result()[0]


@pytest.fixture(scope="module")
def run_b():
    return RUNS.result()[1]


def _decoder():
    import importlib.resources

    import sentencepiece

    path = importlib.resources.files("maxtext") / "assets" / "tokenizers" / "tokenizer.llama2"
    return sentencepiece.SentencePieceProcessor(model_file=str(path))


def _record(sp, row: list[int]) -> int | None:
    match = re.match(r"record (\d{5}):", sp.decode([t for t in row if t > 2]))
    return int(match.group(1)) if match else None


def _attempts(workdir: Path) -> list[list[dict]]:
    """The trace's batches, by attempt (the processes of one worker group), oldest first; within an attempt, by
    process, then in the order they were read."""
    by_pid = defaultdict(list)
    for path in (workdir / "data-trace").glob("data-*.jsonl"):
        for line in path.read_text().splitlines():
            rec = json.loads(line)
            by_pid[rec["pid"]].append(rec)
    pids = sorted(by_pid, key=lambda pid: by_pid[pid][0]["t"])
    attempts, i = [], 0
    while i < len(pids):
        hosts = by_pid[pids[i]][0]["hosts"]
        attempts.append([rec for pid in pids[i:i + hosts] for rec in sorted(by_pid[pid], key=lambda r: r["call"])])
        i += hosts
    return attempts


def test_parquet_text_trains_resumes_and_reaches_its_target(run_b):
    _, result, stdout, _ = run_b
    assert result["steps_completed"] == STEPS and math.isfinite(result["final_loss"])
    (failure,) = result["failures"]
    assert failure["kind"] == "worker-killed" and 0 <= failure["steps_redone"] <= CHECKPOINT_PERIOD
    assert "model check: MaxText built 2,185,376 parameters" in stdout


def test_parquet_resumes_at_the_next_record(run_b):
    workdir, result, _, first = run_b
    sp = _decoder()
    (failure,) = result["failures"]
    before_attempt, after_attempt = _attempts(workdir)
    resumed = failure["resumed_at_step"]

    def rows_by_step(batches, start):
        steps = defaultdict(list)
        for rec in batches:
            steps[start + rec["call"]].append((rec["rank"], rec["rows"]))
        return {step: sorted(rows) for step, rows in steps.items()}

    before, after = rows_by_step(before_attempt, 0), rows_by_step(after_attempt, resumed)
    redone = sorted(set(before) & set(after))
    assert redone and redone[0] == resumed, (sorted(before), sorted(after))
    for step in redone:
        first_time, again = dict(before[step]), dict(after[step])
        # Every host read the batch of a step the failed group trained. A batch MaxText loaded ahead, past the
        # last step that group reported, may be missing on the SIGKILLed host, which died before reaching it.
        if step <= failure["last_step"]:
            assert first_time.keys() == again.keys(), (step, sorted(first_time), sorted(again))
        else:
            assert first_time.keys() <= again.keys(), (step, sorted(first_time), sorted(again))
        for rank, rows in first_time.items():
            assert again[rank] == rows, (step, rank)     # the same rows, on every host that read them twice
    history = [before[s] for s in sorted(before) if s < resumed] + [after[s] for s in sorted(after)]
    assert len(history) == STEPS
    read = sorted(_record(sp, row) for step in history for _, rows in step for row in rows)
    assert read == list(range(first, first + len(read)))  # the file's first records, each once


def test_loaded_parameters_start_where_the_earlier_run_stopped(run_a, run_b):
    """Run B's step 0 and run A's step 26: the parameters saved at step 25, the same batch, the same devices."""
    _, result_a, _ = run_a
    _, result_b, _, _ = run_b
    last_attempt = result_a["step_losses"][-1]["attempt"]
    loss_a = next(r["loss"] for r in result_a["step_losses"]
                  if r["attempt"] == last_attempt and r["step"] == LOADED_STEP + 1)
    first_b = result_b["step_losses"][0]
    assert first_b["step"] == 0
    assert abs(first_b["loss"] - loss_a) <= 1e-4, (first_b["loss"], loss_a)
    assert result_a["step_losses"][0]["loss"] - loss_a > 0.1          # and not the loss of fresh weights


def test_elastic_run_loses_a_slice_and_reaches_its_target(run_a):
    _, result, _ = run_a
    assert result["steps_completed"] == STEPS and math.isfinite(result["final_loss"])
    (failure,) = result["failures"]
    assert failure["kind"] == "slice-lost" and 0 <= failure["steps_redone"] <= CHECKPOINT_PERIOD
    assert failure["workers_after"] == 2 and result["scaling"]["workers_final"] == 2
    losses = [r["loss"] for r in result["step_losses"]]
    assert losses[-1] < losses[0] - 0.2                     # it trains: from about ln 32000 = 10.4 down


def test_the_scale_up_notice_actor_survives_the_lost_slice(run_a):
    """The scale-up notice actor that rank 0 polls every step (trainer/resize.py) must not be on the lost slice:
    before it was pinned to the controller's node, Ray could place it there and the next poll failed the run with
    "The actor died because its node has died"."""
    workdir, _, _ = run_a
    driver_log = (workdir / "driver.log").read_text(errors="replace")
    assert "class_name: ScaleUpNotice" not in driver_log          # the notice actor never died
    assert "notice actor unreachable" not in driver_log           # and rank 0 always reached it
    assert "watchdog: first new step within" in driver_log        # the watchdog watched, and let it be


def test_elastic_run_reads_every_record_once_across_the_resize(run_a):
    workdir, _, _ = run_a
    sp = _decoder()
    attempts = _attempts(workdir)
    hosts = [a[0]["hosts"] for a in attempts]
    assert hosts[0] == 4 and hosts[-1] == 2, hosts          # 2 slices, then 1 (Ray Train may retry in between)
    # Every host's batch is the records its position names: host i of n reads p+i, p+i+n, ...
    batches = []                                    # (attempt, position, global batch, records)
    starts = [min(rec["position"] for rec in attempt) for attempt in attempts]
    for k, attempt in enumerate(attempts):
        by_position = defaultdict(list)
        for rec in attempt:
            assert rec["position"] is not None
            by_position[rec["position"]].append(rec)
        for position, recs in by_position.items():
            ranks = sorted(r["rank"] for r in recs)
            # Every host read every batch of the history. A batch MaxText loads ahead, past where the next attempt
            # resumed, may be missing on a host of the lost slice: its processes are SIGKILLed one after another
            # (trainer/local/cluster.py kill_slice), and one may load the batch the other never reached.
            if k == len(attempts) - 1 or position < starts[k + 1]:
                assert ranks == list(range(recs[0]["hosts"])), (k, position, ranks)
            else:
                assert set(ranks) <= set(range(recs[0]["hosts"])), (k, position, ranks)
            records = []
            for rec in recs:
                got = [_record(sp, row) for row in rec["rows"]]
                want = [position + rec["rank"] + j * rec["hosts"] for j in range(len(rec["rows"]))]
                assert got == want, (k, position, rec["rank"])
                records += got
            batches.append((k, position, len(records), sorted(records)))
    # The run's history: each attempt up to where the next one resumed, then the last attempt.
    history = [b for b in batches if b[0] == len(attempts) - 1 or b[1] < starts[b[0] + 1]]
    assert len(history) == STEPS
    read = sorted(r for b in history for r in b[3])
    assert read == list(range(len(read)))           # every record from 0 on, once: none skipped, none twice
    # Read again: per restore, only the steps since the checkpoint it restored (and the batches MaxText had
    # loaded ahead, at most 2), within the records of the history.
    for k in range(len(attempts) - 1):
        again = [b for b in batches if b[0] == k and b[1] >= starts[k + 1]]
        assert len(again) <= CHECKPOINT_PERIOD + 2, (k, again)
    history_records = {r for b in history for r in b[3]}
    assert all(set(b[3]) <= history_records for b in batches)
