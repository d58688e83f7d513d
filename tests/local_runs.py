"""The end-to-end tests' `python -m trainer.local` runs: with deadlines that report how far a run got, and started
in the background as soon as the session has collected them.

A local run is minutes of a real Ray cluster and MaxText on CPU; the rest of the suite is minutes of one Python
process. A test module plans its runs when it is imported (`plan`); once pytest has collected the session,
tests/conftest.py starts the planned runs of the modules it selected in a thread of their own, and the module's
fixture waits for its result (`PlannedRun.result`), so the runs go on while the unit tests do. The runs go one at
a time: each is a cluster of its own on a 2-core machine, and two working at once (tried) drove a clean-clone CI
to a load average of 30 and a node past Ray's start timeout. A run that holds a slice's capacity away for minutes
(the e2e run's `--hold-slice`) only waits then, so it lends that wait (`hold_lease`) to the runs planned to fit in
one (`fits_in_a_hold`: no deadline of seconds to meet, such as a notice's grace, which a busy machine could make
them miss); the other runs go after it, when the unit tests have mostly ended. A run works as it would in the
foreground: its environment is the session's as it was at the start (a test's monkeypatched variables never reach
it), and each wait has a deadline it reports.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pytest

from trainer import cpu_compile_cache

REPO = Path(__file__).resolve().parent.parent
# After trainer.local's own --timeout it still stops its cluster, prints its table and writes its JSON: this long.
LOCAL_RUN_WIND_DOWN_S = 180.0
# SIGTERM makes trainer.local stop everything it started (its signal handler); SIGKILL only after this long.
LOCAL_RUN_STOP_S = 60.0
# Taken when this module is imported, before any test can patch them: the background runs start and stop their
# processes with these, whatever a unit test running beside them has monkeypatched in `subprocess` or `os`.
_POPEN = subprocess.Popen


@dataclass
class LocalRunResult:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str
    wall_s: float

    def last_step(self) -> str:
        """The last "local: step N of T" line trainer.local printed, or that it printed none."""
        steps = [line for line in self.stdout.splitlines() if line.startswith("local: step ")]
        return steps[-1].strip() if steps else "no step done"

    def driver_log_tail(self, lines: int = 40) -> str:
        """The end of the driver's log in the work directory trainer.local kept ("local: kept DIR"), without
        MaxText's config listing: why a run failed, readable after pytest has rotated its temporary directories."""
        kept = [line.split("local: kept ", 1)[1].strip() for line in self.stdout.splitlines()
                if line.startswith("local: kept ")]
        log = Path(kept[-1]) / "driver.log" if kept else None
        if log is None or not log.is_file():
            return "(no driver log kept)"
        text = [line for line in log.read_text(errors="replace").splitlines() if "Config param " not in line]
        return "\n".join(text[-lines:])

    def describe(self) -> str:
        """What a failed assertion shows: the run, how long, how far it got, and the ends of its output and of
        the driver's log."""
        return (f"python -m trainer.local {' '.join(self.argv)}\n  exit {self.returncode} after {self.wall_s:.0f}s; "
                f"last progress: {self.last_step()}\n--- stdout (end) ---\n{self.stdout[-3000:]}\n"
                f"--- stderr (end) ---\n{self.stderr[-3000:]}\n--- driver log (end) ---\n{self.driver_log_tail()}")


def run_trainer_local(argv: list[str], timeout_s: float, logs: Path) -> LocalRunResult:
    """Run `python -m trainer.local ARGV --timeout TIMEOUT_S` to its end, its output in LOGS/local.{out,err}.

    Two deadlines, both reported with how far the run got: trainer.local's own (it gives up, stops its cluster and
    exits 1), and ours, LOCAL_RUN_WIND_DOWN_S later, for a trainer.local that hangs: it gets SIGTERM (it stops every
    process it started), then SIGKILL, and the test fails naming the last step done. Never a silent wait until
    CI's own limit, and never a Ray cluster left running for the tests that follow."""
    return run_with_deadlines([sys.executable, "-m", "trainer.local"], argv, timeout_s, logs)


def run_with_deadlines(command: list[str], argv: list[str], timeout_s: float, logs: Path) -> LocalRunResult:
    """run_trainer_local's body; COMMAND is `python -m trainer.local` except in the test of the deadlines."""
    return SESSION.run_with_deadlines(command, argv, timeout_s, logs)


def _stop_local_run(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=LOCAL_RUN_STOP_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# The file a run that lends its hold is given (`trainer.local --hold-while`), in its work directory.
HOLD_LEASE = "hold-lease"
# How often the thread that runs the planned runs looks for a lending run's hold to begin.
LEASE_POLL_S = 1.0


@dataclass
class PlannedRun:
    """The local runs one test module makes: `start(workdir)` makes them (each through run_trainer_local) and
    returns what the module's tests read; `timeout_s` is the sum of their trainer.local --timeouts.
    `lends_hold`: its run holds a slice's capacity away (`--hold-slice`) for minutes in which it only waits, and
    the runs that fit in a hold are made during that wait (hold_lease). `fits_in_a_hold`: its runs meet no
    deadline of seconds (no notice's grace), so they may be made while another run holds."""
    name: str
    module: str
    start: Callable[[Path], Any]
    timeout_s: float
    runs: int
    owner: "LocalRuns"
    lends_hold: bool = False
    fits_in_a_hold: bool = False
    future: Future = field(default_factory=Future)

    def deadline_s(self) -> float:
        """The longest its runs may take, every deadline of run_with_deadlines spent."""
        return self.timeout_s + self.runs * (LOCAL_RUN_WIND_DOWN_S + LOCAL_RUN_STOP_S)

    def result(self) -> Any:
        """What `start` returned (or raised), waiting for the runs planned before it and then for its own, each
        within its deadline; made here and now if the session did not start it (its module was imported after
        the session's collection)."""
        owner = self.owner
        if self.name not in owner.scheduled:
            owner.run(self, owner.mktemp or _default_mktemp)
            return self.future.result()
        ahead = owner.order[:owner.order.index(self) + 1]
        wait_s = sum(planned.deadline_s() for planned in ahead)
        wait_s += owner.lent_s.get(self.name, 0.0)      # the runs made in its hold
        started = time.monotonic()
        try:
            return self.future.result(timeout=wait_s)
        except TimeoutError:
            pytest.fail(f"the local run {self.name} did not end within {wait_s:.0f}s of waiting "
                        f"({time.monotonic() - started:.0f}s): the runs before it and its own, every deadline spent")


class LocalRuns:
    """A session's planned runs, the thread that makes them, and the processes of the run going on."""

    def __init__(self) -> None:
        self.planned: list[PlannedRun] = []
        self.scheduled: set[str] = set()
        # The order the session's runs are made in (`start`): a lender first, the runs made in its hold, the rest.
        self.order: list[PlannedRun] = []
        self.mktemp: Callable[[str], Path] | None = None
        # The environment the runs start with: the session's at its start (None: this process's, as it is).
        self.environment: dict[str, str] | None = None
        self.running: set[subprocess.Popen] = set()
        self.stopping = threading.Event()
        self.wall_s: dict[str, float] = {}
        # A lending run's name -> the lease file it is given and the deadlines of the runs made in its hold.
        self.leases: dict[str, Path] = {}
        self.lent_s: dict[str, float] = {}
        self.lent_wall_s: dict[str, float] = {}

    def plan(self, name: str, module: str, start: Callable[[Path], Any], timeout_s: float,
             runs: int = 1, lends_hold: bool = False, fits_in_a_hold: bool = False) -> PlannedRun:
        """A test module's local runs (call it when the module is imported; `module` is its __name__)."""
        planned = PlannedRun(name, module, start, timeout_s, runs, self, lends_hold, fits_in_a_hold)
        self.planned.append(planned)
        return planned

    def hold_lease(self, name: str) -> tuple[Path | None, float]:
        """For a lending run's `start`: the file to give `trainer.local --hold-while` and the seconds to add to
        its --timeout (the deadlines of the runs made in its hold), or (None, 0) when no run that fits in a hold
        was chosen with it. trainer.local writes the file when the hold begins; those runs are then made while it
        waits (it only waits: its slice's capacity is away, Ray Train reschedules the group every minute), and
        the file is removed when they have ended, which ends the hold if it has lasted its own seconds."""
        lease = self.leases.get(name)
        return (lease, self.lent_s.get(name, 0.0)) if lease is not None else (None, 0.0)

    def start(self, selected_modules: set[str], mktemp: Callable[[str], Path]) -> None:
        """Start, one after another in a background thread, the planned runs of the modules selected."""
        self.mktemp = mktemp
        self.environment = dict(os.environ)
        chosen = [planned for planned in self.planned if planned.module in selected_modules]
        self.scheduled.update(planned.name for planned in chosen)
        self.order = self._ordered(chosen)
        if chosen:
            # One XLA cache for the session's runs (trainer/cpu_compile_cache.py): a worker group that starts
            # again with programs compiled before reads them instead of compiling them on two loaded cores.
            self.environment.setdefault(cpu_compile_cache.CACHE_ENV, str(mktemp("jax-cache")))
            threading.Thread(target=self._run_all, args=(list(self.order), mktemp), name="local-runs",
                             daemon=True).start()

    def stop(self) -> None:
        """No further run starts; a run going on is stopped (trainer.local stops its Ray nodes on SIGTERM)."""
        self.stopping.set()
        for proc in list(self.running):
            _stop_local_run(proc)

    def run(self, planned: PlannedRun, mktemp: Callable[[str], Path]) -> None:
        started = time.monotonic()
        try:
            made = planned.start(mktemp(planned.name))
        except BaseException as error:            # pytest.fail's exception included: the waiting test shows it
            self.wall_s[planned.name] = time.monotonic() - started
            planned.future.set_exception(error)
        else:
            self.wall_s[planned.name] = time.monotonic() - started
            planned.future.set_result(made)

    def summary(self) -> list[str]:
        """One line per run made, with its wall time: where the suite's minutes go (docs/development.md). A run
        that lent its hold names the part of its time the runs made meanwhile took (counted in theirs too)."""
        return [f"{planned.name}: {self.wall_s[planned.name]:.0f} s for {planned.runs} run(s) of trainer.local"
                + (f", {self.lent_wall_s[planned.name]:.0f} s of it lent to the runs made in its hold"
                   if planned.name in self.lent_wall_s else "")
                for planned in self.planned if planned.name in self.wall_s]

    def waiting_modules_last(self, items: list) -> list:
        """`items` (pytest's collected tests) with the tests of modules that wait for a planned run moved to the
        end, each module kept whole and in place relative to the others: the unit tests then run while the
        background runs go on, instead of queueing behind the first test that waits for a run (the test files
        after a waiting module's would otherwise start only when its run has ended)."""
        waiting = {planned.module for planned in self.planned}
        module_of = [getattr(getattr(item, "module", None), "__name__", None) for item in items]
        return ([item for item, module in zip(items, module_of) if module not in waiting]
                + [item for item, module in zip(items, module_of) if module in waiting])

    @staticmethod
    def _ordered(chosen: list[PlannedRun]) -> list[PlannedRun]:
        """The first lender chosen, then the runs that fit in its hold, then the others, each group as planned:
        the others (which may have a notice's grace to meet) come last, when the unit tests have mostly ended."""
        lender = next((planned for planned in chosen if planned.lends_hold), None)
        if lender is None:
            return list(chosen)
        borrowers = LocalRuns._borrowers(lender, chosen)
        return [lender, *borrowers, *(planned for planned in chosen if planned is not lender
                                      and planned not in borrowers)]

    @staticmethod
    def _borrowers(lender: PlannedRun, runs: list[PlannedRun]) -> list[PlannedRun]:
        """The runs of `runs` made in `lender`'s hold (none unless it lends one): those planned to fit in one."""
        return [run for run in runs if run.fits_in_a_hold and run is not lender] if lender.lends_hold else []

    def _run_all(self, order: list[PlannedRun], mktemp: Callable[[str], Path]) -> None:
        queue = list(order)
        while queue:
            planned = queue.pop(0)
            if self.stopping.is_set():
                planned.future.set_exception(RuntimeError(f"the session ended before the local run {planned.name}"))
                continue
            borrowers = self._borrowers(planned, queue)
            if borrowers:
                left = self._lend_hold(planned, borrowers, mktemp)
                queue = [*left, *(run for run in queue if run not in borrowers)]
            else:
                self.run(planned, mktemp)

    def _lend_hold(self, lender: PlannedRun, queue: list[PlannedRun],
                   mktemp: Callable[[str], Path]) -> list[PlannedRun]:
        """Make `lender` in a thread of its own and, once its hold has begun (its lease file exists), the runs of
        `queue` one after another in this thread (the lender only waits meanwhile), then remove the lease. What is
        left to run (none, or all of `queue` if it never held)."""
        workdir = mktemp(lender.name)
        lease = workdir / HOLD_LEASE
        self.leases[lender.name] = lease
        self.lent_s[lender.name] = sum(planned.deadline_s() for planned in queue)
        thread = threading.Thread(target=self.run, args=(lender, lambda _name: workdir), name="local-run-lender",
                                  daemon=True)
        thread.start()
        while thread.is_alive() and not lease.exists():
            thread.join(LEASE_POLL_S)
        if not lease.exists():
            return queue                        # it ended without a hold: the others run after it as planned
        lent = time.monotonic()
        for planned in queue:
            if self.stopping.is_set():
                planned.future.set_exception(RuntimeError(f"the session ended before the local run {planned.name}"))
                continue
            self.run(planned, mktemp)
        lease.unlink(missing_ok=True)
        self.lent_wall_s[lender.name] = time.monotonic() - lent
        thread.join()
        return []

    def run_with_deadlines(self, command: list[str], argv: list[str], timeout_s: float,
                           logs: Path) -> LocalRunResult:
        logs.mkdir(parents=True, exist_ok=True)
        argv = [*argv, "--timeout", str(timeout_s)]
        out_path, err_path = logs / "local.out", logs / "local.err"
        started = time.monotonic()
        with open(out_path, "w") as out, open(err_path, "w") as err:
            proc = _POPEN([*command, *argv], cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, text=True,
                          env=self.environment)
            self.running.add(proc)
            try:
                proc.wait(timeout=timeout_s + LOCAL_RUN_WIND_DOWN_S)
            except BaseException as stop:        # our deadline, or the session interrupted (Ctrl-C)
                _stop_local_run(proc)
                if not isinstance(stop, subprocess.TimeoutExpired):
                    raise
                hung = LocalRunResult(argv, proc.returncode, out_path.read_text(errors="replace"),
                                      err_path.read_text(errors="replace"), time.monotonic() - started)
                pytest.fail(f"trainer.local did not end within {timeout_s + LOCAL_RUN_WIND_DOWN_S:.0f}s (its "
                            f"--timeout {timeout_s:.0f}s + {LOCAL_RUN_WIND_DOWN_S:.0f}s to wind down); stopped it.\n"
                            + hung.describe())
            finally:
                self.running.discard(proc)
        return LocalRunResult(argv, proc.returncode, out_path.read_text(errors="replace"),
                              err_path.read_text(errors="replace"), time.monotonic() - started)


def _default_mktemp(name: str) -> Path:
    import tempfile
    return Path(tempfile.mkdtemp(prefix=f"{name}-"))


# This session's runs (tests/conftest.py starts and stops them).
SESSION = LocalRuns()
plan = SESSION.plan
start = SESSION.start
stop = SESSION.stop
waiting_modules_last = SESSION.waiting_modules_last
hold_lease = SESSION.hold_lease
