"""Recovery benchmark: one injected event per run, on the local fake-TPU cluster.

  elastic shrink   --elastic 1,2 --kill-slice-at N   a slice is lost; Ray Train continues on the one left
  in-place retry   --fail-at N                       a worker dies; Ray Train restarts the group in place
  cold restart     --fail-at N --recovery cold       driver and cluster die; both restart, MaxText resumes
  spot notice      --preempt-slice-at N              SIGTERM to one slice's hosts, SIGKILL 15 s later (GKE's
                                                     Spot shutdown); the hosts save at the agreed step first
  elastic growth   --elastic 1,2 --start-slices 1 --add-slice-at N
                                                     the second slice arrives; the group saves, then re-forms

Each scenario is a full `python -m trainer.local` run (same model, steps and checkpoint period), run one
after another so they do not compete for the machine. Not a timed test: numbers depend on the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = (
    ("elastic shrink", ["--elastic", "1,2", "--kill-slice-at"]),
    ("in-place retry", ["--fail-at"]),
    ("cold restart", ["--recovery", "cold", "--fail-at"]),
    ("spot notice", ["--preempt-slice-at"]),
    ("elastic growth", ["--elastic", "1,2", "--start-slices", "1", "--add-slice-at"]),
)
BASELINE = "in-place retry"


def run_scenario(flags: list[str], fail_at: int, steps: int, checkpoint_period: int, out: Path) -> dict:
    cmd = [sys.executable, "-m", "trainer.local", *flags, str(fail_at), "--steps", str(steps),
           "--checkpoint-period", str(checkpoint_period), "--json", str(out)]
    print("$ " + " ".join(cmd[1:]), flush=True)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if not out.exists():
        raise SystemExit(f"scenario failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    result = json.loads(out.read_text())
    result["exit_code"] = proc.returncode
    return result


def machine() -> str:
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1024**3
    return f"{os.cpu_count()} cores, {mem_gib:.0f} GiB, Python {platform.python_version()}"


def table(results: dict[str, dict]) -> str:
    base = results.get(BASELINE, {}).get("failures", [{}])[0]
    head = (f"{'recovery':<16}{'recovery s':>11}{'steps redone':>14}{'saved at':>10}{'goodput':>9}{'wall s':>8}"
            f"{'workers after':>15}{'vs retry (s)':>14}")
    lines = [head, "-" * len(head)]
    for name, result in results.items():
        failure = result["failures"][0] if result["failures"] else {}
        rec = failure.get("recovery_s")
        ratio = f"{rec / base['recovery_s']:.2f}x" if rec and base.get("recovery_s") else "-"
        lines.append(f"{name:<16}{(f'{rec:.1f}' if rec is not None else 'never'):>11}"
                     f"{str(failure.get('steps_redone', '-')):>14}{str(failure.get('saved_at_notice') or '-'):>10}"
                     f"{result['goodput']:>9.1%}{result['wall_s']:>8.0f}"
                     f"{str(failure.get('workers_after', '-')):>15}{ratio:>14}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="benchmarks/recovery", description=__doc__.split("\n\n")[0])
    parser.add_argument("--fail-at", type=int, default=12)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--checkpoint-period", type=int, default=5)
    parser.add_argument("--json", dest="json_path", help="also write all results here")
    parser.add_argument("--only", action="append", choices=[name for name, _ in SCENARIOS],
                        help="run only this scenario (repeatable)")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory(prefix="recovery-bench-") as tmp:
        for name, flags in SCENARIOS:
            if args.only and name not in args.only:
                continue
            results[name] = run_scenario(flags, args.fail_at, args.steps, args.checkpoint_period,
                                         Path(tmp) / f"{name.replace(' ', '-')}.json")
    print(f"\nrecovery from one failure at step {args.fail_at} of {args.steps} (checkpoint every "
          f"{args.checkpoint_period}); tiny MaxText model on 2 x v6e 2x4 fake slices; {machine()}\n")
    print(table(results))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"machine": machine(), "results": results}, indent=2) + "\n")
    return 0 if all(r["exit_code"] == 0 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
