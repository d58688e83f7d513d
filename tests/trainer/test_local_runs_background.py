"""The end-to-end runs start in the background once the session is collected (tests/local_runs.py): one at a
time, in the order planned, only for the modules the session selected; a run starts with the session's
environment as it was (a variable a unit test sets meanwhile never reaches it); the test waiting for a run gets
its result or its failure; a session that ends stops a run still going."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests import local_runs


@pytest.fixture
def runs():
    """A registry of its own, as a new session's (the session's own runs go on beside it untouched)."""
    registry = local_runs.LocalRuns()
    yield registry
    registry.stop()


def _script(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _mktemp(root: Path):
    def make(name: str) -> Path:
        path = root / name
        path.mkdir()
        return path
    return make


def test_planned_runs_go_one_at_a_time_in_order_for_the_selected_modules_only(runs, tmp_path):
    log = tmp_path / "order.log"

    def start(tag: str):
        def run(workdir: Path):
            code = (f"import time; open({str(log)!r}, 'a').write('start {tag} ' + str(time.monotonic()) + '\\n');"
                    f"time.sleep(0.5); open({str(log)!r}, 'a').write('end {tag} ' + str(time.monotonic()) + '\\n')")
            return runs.run_with_deadlines(_script(code), [], 60.0, workdir).returncode, workdir.name
        return run

    first = runs.plan("first", "tests.a", start("first"), 60.0)
    skipped = runs.plan("skipped", "tests.not_selected", start("skipped"), 60.0)
    second = runs.plan("second", "tests.b", start("second"), 60.0)
    runs.start({"tests.a", "tests.b"}, _mktemp(tmp_path))
    assert second.result() == (0, "second") and first.result() == (0, "first")
    events = [line.split()[:2] for line in log.read_text().splitlines()]
    assert events == [["start", "first"], ["end", "first"], ["start", "second"], ["end", "second"]]
    assert not skipped.future.done()
    # The session's summary names the runs made, in their order, and only those.
    assert [line.split(":")[0] for line in runs.summary()] == ["first", "second"]


def test_a_run_starts_with_the_sessions_environment_not_a_tests_patch(runs, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCAL_RUNS_PROBE", "session")
    seen = tmp_path / "seen"
    gate = tmp_path / "gate"

    def run(workdir: Path):
        while not gate.exists():             # the unit test beside it patches the environment meanwhile
            time.sleep(0.05)
        code = f"import os; open({str(seen)!r}, 'w').write(os.environ.get('LOCAL_RUNS_PROBE', 'unset'))"
        return runs.run_with_deadlines(_script(code), [], 60.0, workdir).returncode

    planned = runs.plan("probe", "tests.a", run, 60.0)
    runs.start({"tests.a"}, _mktemp(tmp_path))
    monkeypatch.setenv("LOCAL_RUNS_PROBE", "a unit test's")
    gate.write_text("")
    assert planned.result() == 0
    assert seen.read_text() == "session"


def test_the_waiting_test_gets_the_runs_failure(runs, tmp_path):
    def run(workdir: Path):
        result = runs.run_with_deadlines(_script("import sys; print('local: step 3 of 30'); sys.exit(1)"), [],
                                               60.0, workdir)
        assert result.returncode == 0, result.describe()

    planned = runs.plan("fails", "tests.a", run, 60.0)
    runs.start({"tests.a"}, _mktemp(tmp_path))
    with pytest.raises(AssertionError, match="last progress: local: step 3 of 30"):
        planned.result()


def test_the_end_of_the_session_stops_a_run_still_going(runs, tmp_path):
    pid_file = tmp_path / "pid"

    def run(workdir: Path):
        code = (f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)")
        return runs.run_with_deadlines(_script(code), [], 600.0, workdir).returncode

    planned = runs.plan("long", "tests.a", run, 600.0)
    after = runs.plan("after", "tests.a", run, 600.0)
    runs.start({"tests.a"}, _mktemp(tmp_path))
    deadline = time.monotonic() + 60
    while not (pid_file.exists() and runs.running) and time.monotonic() < deadline:
        time.sleep(0.05)
    runs.stop()
    assert planned.result(), "stopped: a non-zero exit"           # SIGTERM's exit, not the 300 s sleep
    with pytest.raises(RuntimeError, match="session ended before the local run after"):
        after.result()
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


class _Item:
    """A collected test as waiting_modules_last sees it: its module's name and its own."""

    def __init__(self, module: str, name: str):
        self.module = type(sys)(module)
        self.name = name


def test_the_tests_that_wait_for_a_run_go_last_each_module_whole_and_in_order(runs):
    runs.plan("e2e", "tests.trainer.test_local_e2e", lambda work: None, 60)
    runs.plan("life", "tests.trainer.test_local_life", lambda work: None, 60)
    items = [_Item(module, name) for module, name in [
        ("tests.core.test_a", "a1"), ("tests.trainer.test_local_e2e", "e1"), ("tests.trainer.test_local_e2e", "e2"),
        ("tests.trainer.test_local_heartbeat", "h1"), ("tests.trainer.test_local_life", "l1"),
        ("tests.workloads.test_z", "z1")]]
    ordered = [item.name for item in runs.waiting_modules_last(items)]
    # Before, the session reached e1, waited there for the e2e run and only then ran h1 and z1.
    assert ordered == ["a1", "h1", "z1", "e1", "e2", "l1"]


def test_a_run_that_lends_its_hold_has_the_runs_that_fit_made_while_it_waits_and_the_others_after_it(runs,
                                                                                                     tmp_path):
    """A run whose slice's capacity is held away (`trainer.local --hold-slice ... --hold-while FILE`) only waits;
    the runs planned to fit in a hold (no notice's grace to meet), before it or after it, are made in that wait,
    one at a time, and the hold ends (its file removed) only when they have: never two runs working at once. A
    run with a grace to meet is made after the lender has ended. The lender's wait covers theirs too."""
    log = tmp_path / "order.log"

    def note(tag: str) -> str:
        return f"open({str(log)!r}, 'a').write({tag!r} + '\\n')"

    def lender(workdir: Path):
        lease, extra_s = runs.hold_lease("lender")
        assert lease == workdir / local_runs.HOLD_LEASE and extra_s > 0
        # trainer.local writes the file when its hold begins and waits while it exists (the stand-in: 30 s at most)
        code = (f"import os, time; from pathlib import Path; lease = Path({str(lease)!r}); {note('lender holds')};"
                f"lease.write_text('held'); t = time.monotonic()\n"
                f"while lease.exists() and time.monotonic() - t < 30: time.sleep(0.05)\n"
                f"{note('lender resumes')}; raise SystemExit(0 if not lease.exists() else 3)")
        return runs.run_with_deadlines(_script(code), [], 60.0, workdir).returncode

    def other(tag: str):
        def run(workdir: Path):
            code = f"import time; {note(tag + ' starts')}; time.sleep(0.3); {note(tag + ' ends')}"
            return runs.run_with_deadlines(_script(code), [], 60.0, workdir).returncode
        return run

    first = runs.plan("first", "tests.a", other("first"), 60.0, fits_in_a_hold=True)
    held = runs.plan("lender", "tests.b", lender, 60.0, lends_hold=True)
    graced = runs.plan("graced", "tests.c", other("graced"), 60.0)
    third = runs.plan("third", "tests.d", other("third"), 60.0, fits_in_a_hold=True)
    runs.start({"tests.a", "tests.b", "tests.c", "tests.d"}, _mktemp(tmp_path))
    assert [planned.name for planned in runs.order] == ["lender", "first", "third", "graced"]
    assert held.result() == 0 and first.result() == 0 and third.result() == 0 and graced.result() == 0
    assert log.read_text().splitlines() == ["lender holds", "first starts", "first ends", "third starts",
                                            "third ends", "lender resumes", "graced starts", "graced ends"]
    assert "lent to the runs made in its hold" in runs.summary()[1]


def test_a_lending_run_alone_gets_no_lease_and_one_that_never_holds_keeps_the_order(runs, tmp_path):
    log = tmp_path / "order.log"

    def lender(workdir: Path):
        seen = runs.hold_lease("lender")
        code = f"open({str(log)!r}, 'a').write('lender {seen[0] is not None}\\n')"
        return runs.run_with_deadlines(_script(code), [], 60.0, workdir).returncode

    def other(workdir: Path):
        code = f"open({str(log)!r}, 'a').write('other\\n')"
        return runs.run_with_deadlines(_script(code), [], 60.0, workdir).returncode

    held = runs.plan("lender", "tests.a", lender, 60.0, lends_hold=True)
    after = runs.plan("other", "tests.b", other, 60.0, fits_in_a_hold=True)
    runs.start({"tests.a", "tests.b"}, _mktemp(tmp_path))
    assert held.result() == 0 and after.result() == 0
    # A lease was offered (a run that fits follows) but never taken: the next run waited for the lender's end.
    assert log.read_text().splitlines() == ["lender True", "other"]
    # With no run that fits in a hold chosen beside it (alone, or beside a run with a grace to meet), it is
    # offered none: its hold lasts its own seconds.
    for name, plans in (("alone", []), ("graced", [("graced", False)])):
        registry = local_runs.LocalRuns()
        (tmp_path / name).mkdir()
        registry.plan("lender", "tests.a", lambda workdir, registry=registry: registry.hold_lease("lender"), 60.0,
                      lends_hold=True)
        for other_name, fits in plans:
            registry.plan(other_name, "tests.b", lambda workdir: None, 60.0, fits_in_a_hold=fits)
        registry.start({"tests.a", "tests.b"}, _mktemp(tmp_path / name))
        assert registry.planned[0].result() == (None, 0.0), name
