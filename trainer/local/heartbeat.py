"""What the local run is doing, said at least every HEARTBEAT_S seconds (the main job went silent for
about five minutes while MaxText compiled).

Every line the run prints goes through Heartbeat.say, which remembers when it last spoke; a daemon thread calls
beat() every second, and beat() prints the current phase when nothing was said for HEARTBEAT_S. The phase comes
from the run (starting Ray) or from the progress log (phase_of: compiling before an attempt's first step,
step N/M, saving on a checkpoint step). The clock is injected so a test can drive it.
"""
from __future__ import annotations

import threading
import time
from typing import Callable, TextIO

# Below the 30 s a user waits before wondering whether the run is stuck (a line at least every 30 s).
HEARTBEAT_S = 20.0


class Heartbeat:
    def __init__(self, out: TextIO, clock: Callable[[], float] = time.monotonic, every_s: float = HEARTBEAT_S,
                 prefix: str = "local: "):
        self.out = out
        self.clock = clock
        self.every_s = every_s
        self.prefix = prefix
        self.phase = "starting"
        self._phase_since = clock()
        self._last_said = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, text: str, own_prefix: bool = False) -> None:
        """Print a line (after the prefix, unless the line carries its own) and restart the silence count."""
        with self._lock:
            print(text if own_prefix else f"{self.prefix}{text}", file=self.out, flush=True)
            self._last_said = self.clock()

    def set_phase(self, phase: str) -> None:
        with self._lock:
            if phase != self.phase:
                self.phase, self._phase_since = phase, self.clock()

    def beat(self) -> bool:
        """Say the phase if nothing was said for every_s seconds; True when it spoke."""
        now = self.clock()
        if now - self._last_said < self.every_s:
            return False
        self.say(f"{self.phase} ({now - self._phase_since:.0f}s so far)")
        return True

    def start(self, tick_s: float = 1.0) -> None:
        def loop():
            while not self._stop.wait(tick_s):
                self.beat()
        self._thread = threading.Thread(target=loop, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def phase_of(records: list[dict], steps: int, checkpoint_period: int) -> str:
    """What the run is doing, from its progress log (trainer/progress.py records)."""
    attempt = None
    last_step = None
    for rec in records:
        if rec.get("event") == "attempt":
            attempt, last_step = rec.get("attempt"), None
        elif rec.get("event") == "step":
            last_step = rec["step"]
    if attempt is None:
        return "starting the Ray Train workers and MaxText"
    if last_step is None:
        return f"compiling the training step (minutes on CPU), attempt {attempt}"
    if last_step + 1 >= steps:
        return f"saving the last checkpoint and stopping (step {last_step + 1}/{steps} done)"
    if checkpoint_period and last_step % checkpoint_period == 0:      # MaxText saves where step % period == 0
        return f"training: step {last_step + 1}/{steps} done, saving its checkpoint"
    return f"training: step {last_step + 1}/{steps} done"
