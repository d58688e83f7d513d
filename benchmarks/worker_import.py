"""What a worker's import of MaxText costs, with and without trainer/deferred_imports.py.

    .venv/bin/python benchmarks/worker_import.py               # 3 fresh processes each way
    .venv/bin/python benchmarks/worker_import.py --repeats 5

Every worker process imports `maxtext.trainers.pre_train.train` each time a worker group starts (on every host,
at every restart and resize). Each repeat starts a fresh Python that imports `ray` (a Ray worker has it already)
and then MaxText's train module, and prints the CPU seconds (user + system, this process) and the wall seconds
of MaxText's import alone; the two ways alternate, so a change in the machine's load touches both. The figures
are this machine's at its load of the moment, which the table shows.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = """
import json, sys, time
import ray
if sys.argv[1] == "deferred":
    from trainer import deferred_imports
    deferred_imports.install()
cpu, wall = time.process_time(), time.perf_counter()
from maxtext.trainers.pre_train import train
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall}))
"""

WAYS = ("as imported", "deferred")


def measure(way: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", CHILD, "deferred" if way == "deferred" else "plain"], cwd=REPO,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    samples: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    load_before = os.getloadavg()[0]
    for repeat in range(args.repeats):
        for way in WAYS:
            samples[way].append(measure(way))
            print(f"  repeat {repeat + 1}/{args.repeats} {way}: {samples[way][-1]['cpu']:.2f} s of CPU",
                  file=sys.stderr, flush=True)
    print(f"load average (1 min): {load_before:.1f} before, {os.getloadavg()[0]:.1f} after; "
          f"{args.repeats} fresh processes each way, medians")
    print(f"{'MaxText train module import':<30}{'CPU s':>8}{'wall s':>8}")
    for way in WAYS:
        cpu = statistics.median(s["cpu"] for s in samples[way])
        wall = statistics.median(s["wall"] for s in samples[way])
        print(f"{way:<30}{cpu:>8.2f}{wall:>8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
