"""SIGTERM reaches a JobSet pod and the Pathways head before MaxText starts: a real process test.

A container's main process is PID 1 of its PID namespace, and the kernel drops a signal sent there from an
ancestor namespace (the container runtime's SIGTERM) unless PID 1 installed a handler for it (pid_namespaces(7),
"Signals and the init process"; FACTS §11). So the rendered command is run here as PID 1 of a new PID namespace
(util-linux `unshare --user --map-root-user --pid --fork`), with a stand-in for the slow first minutes (the lock's
install, MaxText's import) that never ends, and SIGTERM is sent from outside, as the kubelet's runtime does. The
pod must end within seconds with 143 (core/exit_codes.py PREEMPTED), the step it was waiting for told too, not
after the grace period with SIGKILL.
"""
from __future__ import annotations

import os
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core import exit_codes
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.bundle import load_bundle
from workloads.jobset import spec as jobset_inputs
from workloads.pathways import spec as pathways_inputs

# Long enough that only a forwarded signal ends it within the test.
NEVER_S = 600
# From SIGTERM to the process gone, with a loaded 2-core machine's slack.
PROMPT_S = 10
# Only a broken run takes this long to reach its slow step; a working one announces it at once.
START_BOUND_S = 120


def _namespaces_available() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "sh", "-c", "echo $$"],
                           capture_output=True, text=True, timeout=30)
    return probe.returncode == 0 and probe.stdout.strip() == "1"


pytestmark = pytest.mark.skipif(not _namespaces_available(),
                                reason="needs unprivileged user and PID namespaces (unshare)")


def _init_pid(launcher: subprocess.Popen) -> int:
    """The PID, seen from here, of the command unshare forked as PID 1 of the new namespace."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("unshare forked no child")


def run_as_pid1_and_terminate(argv: list[str], env: dict[str, str], started: Path, tmp: Path) -> int | None:
    """Run `argv` as PID 1 of a new PID namespace, wait until its slow step says it has started (a line written
    to the FIFO `started`: an event, not a guess at how long start-up takes), send SIGTERM to PID 1 from outside
    and return its exit status (None: still running PROMPT_S later)."""
    os.mkfifo(started)
    reader = os.open(started, os.O_RDONLY | os.O_NONBLOCK)
    launcher = subprocess.Popen(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child",
                                 *argv], env=env, cwd=tmp)
    try:
        init = _init_pid(launcher)
        message = b""
        while not message:
            # The bound only ends a broken run; the line ends the wait as soon as it is written.
            ready, _, _ = select.select([reader], [], [], START_BOUND_S)
            assert ready, "the slow step never started"
            message = os.read(reader, 64)
            assert message or launcher.poll() is None, f"ended before its slow step: {launcher.returncode}"
        os.kill(init, signal.SIGTERM)
        try:
            return launcher.wait(timeout=PROMPT_S)
        except subprocess.TimeoutExpired:
            return None
    finally:
        os.close(reader)
        if launcher.poll() is None:
            launcher.kill()      # --kill-child: its namespace goes with it
            launcher.wait()


def _announce(fifo: Path) -> str:
    """Python: write one line to the test's FIFO (the slow step has started)."""
    return f"with open({str(fifo)!r}, 'w') as fifo:\n    fifo.write('started\\n')\n"


def _executable(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))
    path.chmod(0o755)


def test_a_jobset_pod_terminated_during_its_install_exits_at_once(tmp_path):
    # The runtime install (workerEnvironment=runtime): the pods install the lock at start.
    config = build({**load_stack_config("jobset", REPO), "workerEnvironment": "runtime"})
    jobset = jobset_inputs.jobset_objects(config, load_bundle())["jobset"]
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["bash", "-c"]
    assert "pip install" in container["command"][2], "the stack installs the lock at start"
    # `python` of the image: here a stand-in whose every run is an install that never ends and that records the
    # SIGTERM it is given.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started, told = tmp_path / "install-started", tmp_path / "install-got-term"
    _executable(bin_dir / "python", f"""\
        #!/bin/bash
        trap 'touch {told}; exit 143' TERM
        echo started > {started}
        sleep {NEVER_S} &
        wait
        """)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    status = run_as_pid1_and_terminate([*container["command"], *container.get("args", [])], env, started, tmp_path)
    assert status == exit_codes.PREEMPTED, f"bash as PID 1 did not end on SIGTERM (status {status})"
    assert told.exists(), "the install was not told to stop"


def test_the_pathways_head_terminated_while_maxtext_imports_exits_at_once(tmp_path):
    command = pathways_inputs.trainer_command(build(load_stack_config("pathways", REPO)))
    assert command[:2] == ["bash", "-c"] and "\npython3 -m trainer.pathways_run" in command[2]
    # The image's MaxText: here one whose import never ends (MaxText and JAX take a while to import).
    started = tmp_path / "import-started"
    package = tmp_path / "fake" / "maxtext" / "trainers" / "pre_train"
    package.mkdir(parents=True)
    for directory in (package.parent.parent, package.parent, package):
        (directory / "__init__.py").write_text("")
    (package / "train.py").write_text(f"import time\n{_announce(started)}time.sleep({NEVER_S})\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": f"{REPO}:{tmp_path / 'fake'}", "PYTHONDONTWRITEBYTECODE": "1"}
    status = run_as_pid1_and_terminate(command, env, started, tmp_path)
    assert status == exit_codes.PREEMPTED, f"the head's Python as PID 1 did not end on SIGTERM (status {status})"


def _pathways_head_env(tmp_path: Path) -> dict[str, str]:
    """The head's `python3` is this test's interpreter; `tmp_path/fake` is on its path for stand-ins."""
    (tmp_path / "fake").mkdir(exist_ok=True)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "python3").symlink_to(sys.executable)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "PYTHONPATH": f"{REPO}:{tmp_path / 'fake'}", "PYTHONDONTWRITEBYTECODE": "1"}


def test_the_pathways_head_terminated_during_python_s_start_up_exits_at_once(tmp_path):
    """Before trainer.pathways_run's first statement, the interpreter starts: `site` runs the image's `.pth`
    files and `sitecustomize` (here a stand-in that never finishes). No handler of ours exists yet, so a Python
    exec'd as PID 1 lost that TERM and waited out the grace period; bash as PID 1 (workloads/pid_one.py) traps it
    and forwards it to its child Python, which TERM's default action ends at once: 143."""
    command = pathways_inputs.trainer_command(build(load_stack_config("pathways", REPO)))
    env = _pathways_head_env(tmp_path)
    started = tmp_path / "start-up-started"
    (tmp_path / "fake" / "sitecustomize.py").write_text(f"import time\n{_announce(started)}time.sleep({NEVER_S})\n")
    status = run_as_pid1_and_terminate(command, env, started, tmp_path)
    assert status == exit_codes.PREEMPTED, f"a TERM during Python's start-up was lost (status {status})"


def test_the_pathways_head_ends_with_its_trainer_s_own_code(tmp_path):
    """bash now outlives the trainer: the container's status must still be trainer.pathways_run's own (the
    failure policy ends the run on CONFIG_ERROR, workloads/failure_policy.py), not bash's."""
    command = pathways_inputs.trainer_command(build(load_stack_config("pathways", REPO)))
    env = _pathways_head_env(tmp_path)
    # The image's MaxText: here one whose training module cannot be imported (IMPORT_ERROR, not retried).
    package = tmp_path / "fake" / "maxtext" / "trainers" / "pre_train"
    package.mkdir(parents=True)
    for directory in (package.parent.parent, package.parent, package):
        (directory / "__init__.py").write_text("")
    (package / "train.py").write_text("raise ImportError('a stand-in module missing from the image')\n")
    done = subprocess.run(command, env=env, cwd=tmp_path, capture_output=True, timeout=120)
    assert done.returncode == exit_codes.IMPORT_ERROR, done.stderr[-2000:]


def test_a_failed_install_still_ends_the_pod_with_its_own_code(tmp_path):
    """The steps run as background jobs: their failures must end the script as they did in the foreground."""
    config = build(load_stack_config("jobset", REPO))
    jobset = jobset_inputs.jobset_objects(config, load_bundle())["jobset"]
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "python", "#!/bin/sh\nexit 5\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run([*container["command"], *container.get("args", [])], env=env, cwd=tmp_path,
                          capture_output=True, timeout=60)
    assert done.returncode == exit_codes.RUNTIME_FAILURE, done.stderr


def _python_wrapper(bin_dir: Path, name: str) -> None:
    """`name` on PATH runs this test's interpreter by exec, so the pod's `exec python ...` still leaves Python as
    PID 1 (a symlink would lose the virtual environment's packages)."""
    _executable(bin_dir / name, f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')


def test_a_jobset_pod_terminated_while_maxtext_imports_after_the_exec_exits_at_once(tmp_path):
    """After the script's `exec`, trainer.jobset_run is PID 1, and JAX listens for TERM only from
    jax.distributed.initialize on: the TERM handler must be there from the module's first statements, so a TERM
    while MaxText and JAX import (here: MaxText's checkpointing module, which trainer.notice imports first, never
    finishing its import) ends the pod with PREEMPTED at once, not after the grace period. Without the smoke test,
    which runs from the code mount (its TERM is bash's trap, as for the install above)."""
    config = build({**load_stack_config("jobset", REPO), "smokeTest": "false"})
    jobset = jobset_inputs.jobset_objects(config, load_bundle())["jobset"]
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert 'python -m trainer.jobset_run "$BASE_CONFIG" "$@" &' in container["command"][2].splitlines()
    started = tmp_path / "import-started"
    common = tmp_path / "fake" / "maxtext" / "common"
    common.mkdir(parents=True)
    for directory in (common.parent, common):
        (directory / "__init__.py").write_text("")
    (common / "checkpointing.py").write_text(f"import time\n{_announce(started)}time.sleep({NEVER_S})\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _python_wrapper(bin_dir, "python")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": f"{REPO}:{tmp_path / 'fake'}"}
    status = run_as_pid1_and_terminate([*container["command"], *container.get("args", [])], env, started, tmp_path)
    assert status == exit_codes.PREEMPTED, f"trainer.jobset_run as PID 1 did not end on SIGTERM (status {status})"


def test_once_jax_listens_a_term_is_its_preemption_notice_not_the_early_exit():
    """The early handler must not take the notice from JAX: jax.distributed.initialize starts tsl's
    SigtermNotifier (jax/_src/distributed.py `initialize_preemption_sync_manager`), which installs its own
    handler over Python's; a TERM after that reaches JAX's sync point (the save), and the early exit never runs.
    One real CPU JAX process: trainer.jobset_run's handler, then JAX's initialize, then a TERM to itself."""
    pytest.importorskip("jax")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    program = textwrap.dedent(f"""\
        import os, runpy, signal, sys
        sys.argv = ["trainer.jobset_run"]
        # The module as `python -m` runs it up to main(): its first statements install the early handler.
        namespace = runpy.run_module("trainer.jobset_run", run_name="not_main_yet")
        signal.signal(signal.SIGTERM, namespace["_leave_on_term"])
        import jax
        from jax.experimental import multihost_utils
        jax.distributed.initialize("127.0.0.1:{port}", 1, 0)
        os.kill(os.getpid(), signal.SIGTERM)
        step = 0
        while not multihost_utils.reached_preemption_sync_point(step):
            step += 1
        print(f"JAX notice at step {{step}}", flush=True)
        """)
    done = subprocess.run([sys.executable, "-c", program], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "JAX notice at step" in done.stdout and "SIGTERM before training started" not in done.stderr


def _jobset_container_without_smoke() -> dict:
    config = build({**load_stack_config("jobset", REPO), "smokeTest": "false"})
    jobset = jobset_inputs.jobset_objects(config, load_bundle())["jobset"]
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]


def _jobset_status_when_terminated_in_a_start_up(tmp_path, marker: str) -> int | None:
    """The JobSet container run as PID 1 and sent TERM while one of its Pythons starts: the one whose command
    line holds `marker` runs a stand-in `sitecustomize` (what `site` runs at every interpreter's start) that
    never finishes. Its exit status, or None when the TERM was lost."""
    container = _jobset_container_without_smoke()
    started = tmp_path / "start-up-started"
    fake = tmp_path / "fake"
    (fake / "maxtext").mkdir(parents=True)
    (fake / "maxtext" / "__init__.py").write_text("")          # base.yml's look-up finds the package
    (fake / "sitecustomize.py").write_text(
        "import sys, time\n"
        f"if {marker!r} in sys.orig_argv:\n"
        + textwrap.indent(f"{_announce(started)}time.sleep({NEVER_S})\n", "    "))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _python_wrapper(bin_dir, "python")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": f"{REPO}:{fake}"}
    return run_as_pid1_and_terminate([*container["command"], *container.get("args", [])], env, started, tmp_path)


def test_a_jobset_pod_terminated_during_the_trainer_s_python_start_up_exits_at_once(tmp_path):
    """Before trainer.jobset_run's first statement the interpreter starts: `site` runs the image's `.pth` files
    and `sitecustomize` (here a stand-in that never finishes, for the trainer's process only). With `exec`, that
    Python was PID 1 with no handler and the TERM was lost; bash as PID 1 (workloads/pid_one.py) forwards it to
    its child, which TERM's default action ends at once: 143."""
    status = _jobset_status_when_terminated_in_a_start_up(tmp_path, "trainer.jobset_run")
    assert status == exit_codes.PREEMPTED, f"a TERM during the trainer's start-up was lost (status {status})"


def test_a_jobset_pod_terminated_while_it_looks_up_maxtext_s_base_config_exits_at_once(tmp_path):
    """The look-up of base.yml is a Python run before the trainer. Run as `$(...)`, bash ran its trap only once
    that command substitution ended, so a TERM during its start-up (the stand-in `sitecustomize`, for the
    look-up's `python -c` only) waited with it; as a step it is forwarded and the pod exits 143."""
    status = _jobset_status_when_terminated_in_a_start_up(tmp_path, "-c")
    assert status == exit_codes.PREEMPTED, f"a TERM during base.yml's look-up waited (status {status})"


def test_a_jobset_pod_whose_maxtext_cannot_be_imported_exits_import_error(tmp_path):
    """No `maxtext` package for the look-up (an image or lock problem): IMPORT_ERROR, which no restart fixes."""
    container = _jobset_container_without_smoke()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The image's Python without MaxText: an interpreter that sees only the standard library.
    _executable(bin_dir / "python", f'#!/bin/sh\nexec {shlex.quote(sys.executable)} -S "$@"\n')
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "PYTHONPATH": ""}
    done = subprocess.run([*container["command"], *container.get("args", [])], env=env, cwd=tmp_path,
                          capture_output=True, timeout=120)
    assert done.returncode == exit_codes.IMPORT_ERROR, done.stderr[-2000:]
