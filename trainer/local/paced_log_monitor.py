"""Ray's per-node log monitor with its idle passes paced for a machine that runs several nodes (local cluster only).

Ray's log monitor (ray/_private/log_monitor.py `LogMonitor.run`) loops over its node's log files and, after a pass
that published nothing, sleeps 0.1 s: ten passes a second, each a stat of every file it tracks. That is made for
one node per host; the local cluster runs up to five nodes on two cores, and their log monitors were the CPU's
third-largest user in the suite, after the training workers and pytest itself (289-397 s of CPU in each measured
clean-clone run, docs/development.md). Here an idle pass waits IDLE_PASS_S instead, so a line reaches the driver's
log at most that much later; a pass that published something loops at once, as in Ray. The pace is IDLE_PASS_ENV
in the node's environment (trainer/local/cluster.py LOCAL_DAEMON_POLLING sets it), Ray's own when unset.

trainer.local.ray_loopback starts this module in place of Ray's script, with the same arguments; it runs Ray's
script itself, unchanged, with only its idle sleep paced.
"""
from __future__ import annotations

import os
import runpy
import sys
import time

# Ray 2.60's sleep after a pass that published nothing (log_monitor.py `run`), and where the pace used instead is.
RAY_IDLE_PASS_S = 0.1
IDLE_PASS_ENV = "TRAINER_LOCAL_LOG_MONITOR_IDLE_PASS_S"


def paced(sleep, idle_pass_s: float):
    """`sleep` with Ray's idle pass made `idle_pass_s` long; any other wait unchanged."""

    def paced_sleep(seconds: float) -> None:
        sleep(idle_pass_s if seconds == RAY_IDLE_PASS_S else seconds)

    return paced_sleep


def main() -> None:
    from ray._private import log_monitor

    time.sleep = paced(time.sleep, float(os.environ.get(IDLE_PASS_ENV, RAY_IDLE_PASS_S)))
    sys.argv[0] = log_monitor.__file__
    runpy.run_path(log_monitor.__file__, run_name="__main__")


if __name__ == "__main__":
    main()
