"""`python -m trainer.local` never goes 30 s without a line saying what it is doing, and its last line is the next
command. The reporter runs on a fake clock; the end line is checked on the function main() ends
with. No Ray, no MaxText: the real runs are tests/trainer/test_local_*.py."""
from __future__ import annotations

import io
import time
from pathlib import Path

from trainer.local.heartbeat import HEARTBEAT_S, Heartbeat, phase_of
from trainer.local.run import NEXT_COMMAND, next_step

LIMIT_S = 30          # the main job never goes 30 s without a line


class FakeClock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _lines(out: io.StringIO) -> list[str]:
    return out.getvalue().splitlines()


def test_a_five_minute_compile_is_never_30_seconds_silent_and_names_what_it_does():
    clock, out = FakeClock(), io.StringIO()
    beat = Heartbeat(out, clock)
    said_at = []
    beat.say("Ray cluster up in 12s")
    said_at.append(clock.now)
    records = [{"event": "attempt", "attempt": "71ee9959", "workers": 4, "slices": 2}]   # Ray Train's run id
    beat.set_phase(phase_of(records, steps=30, checkpoint_period=5))
    for _ in range(300):                      # the 5 minutes MaxText took to compile on 2 cores, second by second
        clock.now += 1
        if beat.beat():
            said_at.append(clock.now)
    gaps = [b - a for a, b in zip(said_at, said_at[1:])] + [clock.now - said_at[-1]]
    assert max(gaps) < LIMIT_S and HEARTBEAT_S < LIMIT_S, gaps
    lines = _lines(out)
    assert len(lines) >= 300 // LIMIT_S
    assert all(line.startswith("local: compiling the training step") for line in lines[1:]), lines
    assert lines[-1].endswith("(300s so far)")        # how long this phase has lasted
    assert all(len(line) <= 100 for line in lines), [len(line) for line in lines]


def test_a_line_of_progress_restarts_the_silence_count():
    clock, out = FakeClock(), io.StringIO()
    beat = Heartbeat(out, clock)
    clock.now += HEARTBEAT_S - 1
    beat.say("step    0 of 30  loss 10.4")
    clock.now += HEARTBEAT_S - 1
    assert not beat.beat()                     # 19 s after the step line: nothing to add
    clock.now += 1
    assert beat.beat()
    assert _lines(out)[-1].startswith("local: starting")


def test_the_phase_follows_the_progress_log():
    attempt = {"event": "attempt", "attempt": 1}
    step = lambda n: {"event": "step", "step": n, "loss": 1.0}   # noqa: E731
    assert phase_of([], 30, 5).startswith("starting the Ray Train workers")
    assert phase_of([attempt], 30, 5).startswith("compiling the training step")
    assert phase_of([attempt, step(3)], 30, 5) == "training: step 4/30 done"
    # MaxText saves where step % period == 0.
    assert phase_of([attempt, step(3), step(5)], 30, 5) == "training: step 6/30 done, saving its checkpoint"
    assert phase_of([attempt, step(29)], 30, 5).startswith("saving the last checkpoint")
    # A new attempt (a restart) compiles again before its first step.
    assert phase_of([attempt, step(12), {"event": "attempt", "attempt": 2}], 30, 5) == (
        "compiling the training step (minutes on CPU), attempt 2")


def test_the_thread_beats_on_the_real_clock():
    out = io.StringIO()
    beat = Heartbeat(out, every_s=0.1)
    beat.set_phase("starting Ray")
    beat.start(tick_s=0.02)
    time.sleep(0.5)
    beat.stop()
    assert len(_lines(out)) >= 2 and all("starting Ray" in line for line in _lines(out))


def test_the_last_line_is_the_next_command():
    done = next_step(True, False, Path("tmp-run"))
    assert done.endswith(NEXT_COMMAND) and NEXT_COMMAND == "python -m preview --stack dev"
    assert "driver.log" in next_step(False, False, Path("tmp-run"))
    assert next_step(False, True, Path("tmp-run")).endswith("python -m trainer.local")
    assert all(len("local: " + line) <= 100 for line in (done, next_step(False, True, Path("x"))))
