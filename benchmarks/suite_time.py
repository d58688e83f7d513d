"""The test suite's time per file: runs the README's test command once and prints where the time went.

    python benchmarks/suite_time.py                    # the whole suite, as CI runs it
    python benchmarks/suite_time.py tests/trainer      # any pytest arguments
    PYTEST_ADDOPTS=--junitxml=junit.xml bash .ci/run   # CI itself, then:
    python benchmarks/suite_time.py --from-report junit.xml

pytest writes a JUnit report (each test's setup + call + teardown; a module's fixture, such as a local run, is
counted in the first test that uses it); the table sums it per file, slowest first, with the wall time of the
whole command and the machine it ran on (cores, memory, Python, load average before and after: CI shares a
2-core machine, and a busy neighbour shows in the load). Not a timed test: the figures are the machine's.
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# The README's test command, with a JUnit report beside it.
TEST_COMMAND = [sys.executable, "-m", "pytest"]


def per_file_seconds(junit_xml: Path) -> dict[str, tuple[float, int]]:
    """{test file: (seconds, tests)} from pytest's JUnit report."""
    totals: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for case in ElementTree.parse(junit_xml).getroot().iter("testcase"):
        # pytest names a case's module in `classname` (tests.trainer.test_x[.Class]); `file` is not always set.
        module = case.get("file") or _module_file(case.get("classname", ""))
        totals[module][0] += float(case.get("time", 0.0))
        totals[module][1] += 1
    return {name: (seconds, count) for name, (seconds, count) in totals.items()}


def _module_file(classname: str) -> str:
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = Path(*parts[:end]).with_suffix(".py")
        if (REPO / candidate).is_file():
            return str(candidate)
    return classname


def machine() -> str:
    memory_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (f"{os.cpu_count()} cores, {memory_gib:.0f} GiB, Python {platform.python_version()}, "
            f"{platform.system()} {platform.machine()}")


def table(per_file: dict[str, tuple[float, int]], wall_s: float, shown: int) -> str:
    rows = sorted(per_file.items(), key=lambda item: -item[1][0])
    width = max([len(name) for name, _ in rows[:shown]] + [len("file")])
    lines = [f"{'file':<{width}}  {'tests':>5}  {'seconds':>8}", "-" * (width + 17)]
    for name, (seconds, count) in rows[:shown]:
        lines.append(f"{name:<{width}}  {count:>5}  {seconds:>8.1f}")
    rest = rows[shown:]
    if rest:
        lines.append(f"{f'the other {len(rest)} files':<{width}}  {sum(c for _, (_, c) in rest):>5}  "
                     f"{sum(s for _, (s, _) in rest):>8.1f}")
    lines.append(f"{'all tests (JUnit sum)':<{width}}  {sum(c for _, (_, c) in rows):>5}  "
                 f"{sum(s for _, (s, _) in rows):>8.1f}")
    lines.append(f"wall time of the command: {wall_s / 60:.1f} min")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    shown = 15
    if argv[:1] == ["--from-report"] and len(argv) == 2:
        # A report pytest already wrote (CI's own run): the sum of its cases stands for the wall time.
        per_file = per_file_seconds(Path(argv[1]))
        print(f"machine: {machine()}")
        print(table(per_file, sum(seconds for seconds, _ in per_file.values()), shown))
        return 0
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "junit.xml"
        command = [*TEST_COMMAND, "-q", f"--junitxml={report}", *argv]
        print("$ " + " ".join(["python", *command[1:]]), flush=True)
        started = time.monotonic()
        # pytest's own progress line shows as it goes.
        code = subprocess.call(command, cwd=REPO)
        wall_s = time.monotonic() - started
        if not report.is_file():
            print(f"suite_time: pytest wrote no report (exit {code})", file=sys.stderr)
            return code or 1
        per_file = per_file_seconds(report)
    print()
    print(f"machine: {machine()}; load average (1 min) {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(table(per_file, wall_s, shown))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
