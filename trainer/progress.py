"""The progress log a run leaves behind, and what it says about failures and goodput (pure except I/O).

Rank 0 of every attempt appends JSON lines to `<progress_dir>/progress.jsonl`:
  {"event": "attempt", "t", "attempt", "workers", "slices", "maxtext_version"}   once per (re)start
  {"event": "step", "t", "attempt", "step", "loss", "step_time_s"}                 once per MaxText step
Every rank writes `<progress_dir>/workers/rank-<r>.json` with its pid, so a local harness can kill one.
Rank 0 appends {"event": "notice", "attempt", "step", "reason"} when the hosts agree to save at a notice
(preemption, elastic growth) and {"event": "saved-at-notice", "attempt", "step"} once that checkpoint is written.
The local harness appends {"event": "failure", "t", "kind", "at_step"} when it injects a failure.
Times are wall-clock seconds (time.time()); every process runs on the same machine or NTP-synced hosts.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

PROGRESS_FILE = "progress.jsonl"
WORKERS_DIR = "workers"


def append(progress_dir: str | Path, record: dict) -> None:
    """Append one record; a single short write with O_APPEND keeps concurrent writers' lines whole."""
    path = Path(progress_dir) / PROGRESS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"t": time.time(), **record}) + "\n"
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)


def write_worker(progress_dir: str | Path, rank: int, info: dict) -> None:
    path = Path(progress_dir) / WORKERS_DIR / f"rank-{rank}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "t": time.time(), **info}), encoding="utf-8")
    tmp.replace(path)   # readers never see a half-written file


def read_worker(progress_dir: str | Path, rank: int) -> dict | None:
    try:
        return json.loads((Path(progress_dir) / WORKERS_DIR / f"rank-{rank}.json").read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def read(progress_dir: str | Path) -> list[dict]:
    path = Path(progress_dir) / PROGRESS_FILE
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue    # a line being written right now
    return records


@dataclass(frozen=True)
class FailureOutcome:
    kind: str
    at_step: int | None          # last step recorded before the failure
    recovery_s: float | None     # failure -> first step recorded by a later attempt; None = never resumed
    steps_redone: int | None     # steps the failed attempt had done that a later attempt trained again
    resumed_at_step: int | None
    workers_after: int | None
    last_step: int | None = None        # the failed attempt's last step (it may run on after a notice)
    saved_at_notice: int | None = None  # the step the failed attempt saved at on a notice, if it did


@dataclass(frozen=True)
class Summary:
    target_steps: int
    steps_completed: int
    final_loss: float | None
    attempts: int
    failures: tuple[FailureOutcome, ...]
    productive_s: float
    workers_final: int | None
    maxtext_version: str | None

    @property
    def reached_target(self) -> bool:
        return self.steps_completed >= self.target_steps

    def failures_as_dicts(self) -> list[dict]:
        return [asdict(f) for f in self.failures]


def _steps(records: Iterable[dict]) -> list[dict]:
    return [r for r in records if r.get("event") == "step"]


def summarize(records: list[dict], target_steps: int) -> Summary:
    """Derive the run's outcome. MaxText numbers steps from 0, so `steps` steps end at step steps-1."""
    steps = _steps(records)
    attempts = [r for r in records if r.get("event") == "attempt"]
    saved_at_notice = [r for r in records if r.get("event") == "saved-at-notice"]
    last_by_step: dict[int, dict] = {}
    for rec in steps:
        last_by_step[rec["step"]] = rec       # a redone step counts once, as its last execution
    final = max(steps, key=lambda r: (r["step"], r["t"])) if steps else None
    failures = []
    for failure in (r for r in records if r.get("event") == "failure"):
        failures.append(_failure_outcome(failure, steps, attempts, saved_at_notice))
    return Summary(
        target_steps=target_steps,
        steps_completed=(final["step"] + 1) if final else 0,
        final_loss=final["loss"] if final else None,
        attempts=len(attempts),
        failures=tuple(failures),
        # MaxText's own step time for every step that counts toward the result.
        productive_s=sum(r.get("step_time_s", 0.0) for r in last_by_step.values()),
        workers_final=attempts[-1]["workers"] if attempts else None,
        maxtext_version=attempts[-1].get("maxtext_version") if attempts else None,
    )


def _failure_outcome(failure: dict, steps: list[dict], attempts: list[dict], notices: list[dict]) -> FailureOutcome:
    t_fail = failure["t"]
    before = [r for r in steps if r["t"] <= t_fail]
    failed_attempt = before[-1]["attempt"] if before else None
    at_step = failure.get("at_step", before[-1]["step"] if before else None)
    # After a notice the failed attempt keeps stepping until the hosts agree on a step: count what it did.
    done = [r["step"] for r in steps if r["attempt"] == failed_attempt]
    last_step = max(done) if done else at_step
    saved = next((r["step"] for r in notices if r.get("attempt") == failed_attempt), None)
    after = [r for r in steps if r["t"] > t_fail and r["attempt"] != failed_attempt]
    if not after:
        return FailureOutcome(failure["kind"], at_step, None, None, None, None, last_step, saved)
    first = after[0]
    resumed = next((a for a in attempts if a["attempt"] == first["attempt"]), {})
    redone = max(0, last_step + 1 - first["step"]) if last_step is not None else None
    return FailureOutcome(failure["kind"], at_step, round(first["t"] - t_fail, 3), redone, first["step"],
                          resumed.get("workers"), last_step, saved)
