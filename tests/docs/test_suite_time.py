"""benchmarks/suite_time.py sums pytest's JUnit report per test file (docs/development.md's table comes from it):
a module's tests add up, its fixture time counts once, and cases of a class are counted under their file."""
from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _suite_time():
    spec = importlib.util.spec_from_file_location("suite_time", REPO / "benchmarks" / "suite_time.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_report_is_summed_per_file_slowest_first(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.trainer.test_local_e2e" name="test_a" time="300.5"/>'
        '<testcase classname="tests.trainer.test_local_e2e" name="test_b" time="0.5"/>'
        '<testcase classname="tests.docs.test_suite_time.TestX" name="test_c" time="2.0"/>'
        '</testsuite></testsuites>')
    suite_time = _suite_time()
    per_file = suite_time.per_file_seconds(report)
    assert per_file == {"tests/trainer/test_local_e2e.py": (301.0, 2), "tests/docs/test_suite_time.py": (2.0, 1)}
    text = suite_time.table(per_file, 600.0, shown=1)
    lines = text.splitlines()
    assert lines[2].startswith("tests/trainer/test_local_e2e.py") and lines[2].endswith("301.0")
    assert lines[3].startswith("the other 1 files") and lines[3].endswith("2.0")
    assert lines[4].split()[-2:] == ["3", "303.0"]
    assert lines[-1] == "wall time of the command: 10.0 min"
