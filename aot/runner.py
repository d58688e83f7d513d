"""Pre-flight: compile the stack's exact MaxText training step for its real TPU target, here, on CPU (one compile;
the config build runs it through workloads/compile_check.py, `python -m preview` through preview/compile/).

Why a package of its own: the Pulumi program's config build (compileCheck) runs the compile as well as the offline
plan, and the program may not import preview/. It imports only core/ and is not shipped to the cluster.

    python -m preview --stack dev --compile        # the offline plan, then this compile (preview/cli.py)
    python -m preview.compile --calibrate          # recompile every CALIBRATION_CASES row -> core/xla_calibration.json
    python -m preview.compile --calibrate --case llama3-70b-2xv6e-16-fsdp-b1   # only some rows (others are kept)
    python -m preview.compile --calibrate --memory-only --case ...   # stop once XLA has assigned memory
    TPU_MULTISLICE_COMPILE_PYTHON=PYTHON python -m preview ...  # compile under PYTHON's jax (aot/compile_python.py)

What runs: MaxText's own ahead-of-time compiler, `python -m maxtext.trainers.pre_train.train_compile <base.yml>
<argv> compile_topology=<name> compile_topology_num_slices=<N>` (maxtext 0.2.5,
maxtext/trainers/pre_train/train_compile.py: "you will see the same OOM error message during this compilation as
you would on the target hardware"). It builds the mesh from a TPU topology description
(jax.experimental.topologies.get_topology_desc, through libtpu's PJRT plugin) instead of real chips, and XLA's
TPU backend compiles the whole training step for it, memory assignment included. JAX itself stays on CPU
(JAX_PLATFORMS=cpu); no TPU, no Google Cloud (DECOUPLE_GCLOUD=TRUE, TPU_SKIP_MDS_QUERY=1).

The argv is never built here. It comes from the builder of the stack's backend:
- Ray: the RayJob's `python -m trainer.entrypoint ...` (workloads/ray/spec.py `entrypoint`) run with
  `--print-argv`, which prints what trainer.worker.worker_plan_and_argv gives every worker of the full group;
- JobSet: workloads/jobset/spec.py `training_argv`;
- Pathways: workloads/pathways/spec.py `maxtext_argv` (what `trainer_command` runs).
Only what cannot mean the same thing on this machine is replaced: `base_output_directory` (a local scratch
directory; gs:// needs credentials), `run_name`, `jax_cache_dir` (off), and the base config path (the installed
package's base.yml, maxtext/configs/base.yml). `elastic_enabled` is left out (AOT_DROPPED says why).
The TPU pods' LIBTPU_INIT_ARGS (core/tpu_env.py, as rendered into the stack's manifests) are passed too: the XLA
flags change what the compiler does.

The peak is libtpu's own report, which its INFO log (TPU_LOG_DIR) carries at the end of a TPU compile:
    XLA::TPU program HBM usage: 14.43G / 31.25G
    Total hbm usage >= 20.29G:
        reserved        260.00M
        program          14.43G
        arguments         5.61G
The limit after the slash is what XLA may use per device (31.25 GiB on v6e, 15.75 GiB on v5e). MaxText's
printout, CompiledMemoryStats, is not used: its temp size counts buffers that XLA overlaps and its host figures
are the offloaded activations (maxtext/utils/max_utils.py print_compiled_memory_stats says the compiler "could
over-estimate"). A step that does not fit fails with XLA's
`RESOURCE_EXHAUSTED: ... Ran out of memory in memory space hbm ... Used X of Y hbm`, which is reported as is.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, TextIO

from aot.compile_python import COMPILE_PYTHON_ENV, NOT_INSTALLED, CompilePythonError, front_end, installed
from aot.compiler_output import HLO_PASSES_DONE, memory_assignment, over_the_limit, parse_compiler_output
from core.compile_verdicts import STEP_EVAL, STEP_TRAIN
from core.tpu_catalog import Generation

AOT_MODULE = "maxtext.trainers.pre_train.train_compile"
# Another module instead of train_compile, for this process and the ones it starts: the test suite points it at a
# module that does not exist, so that no plan a test runs as a subprocess starts a real compile (tests/conftest.py).
AOT_MODULE_ENV = "TPU_MULTISLICE_AOT_MODULE"
GIB = 1024**3
PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TIMEOUT_S = 3600.0
EXIT_OK, EXIT_BAD_INPUT, EXIT_DOES_NOT_COMPILE = 0, 2, 4

# MaxText keys left out of the compile only, with the reason shown to the user.
AOT_DROPPED = {
    # maxtext/utils/maxtext_utils.py create_device_mesh: with elastic_enabled it ignores the devices it is given
    # (here: the compile topology's) and lays the mesh out over elastic_utils.live_devices(), i.e. the
    # process's own jax.devices() — one CPU device in an AOT compile, which fails with "Number of devices per
    # slice 1 does not match the product of the ICI parallelism". Elastic mode only decides which slices are
    # live; the step compiled for all slices is the same program.
    "elastic_enabled": "elastic mode lays the mesh out over the live devices (maxtext_utils.create_device_mesh), "
                       "which an ahead-of-time compile does not have; the step for all slices is the same program",
}

# Environment of the compile process.
COMPILE_ENV = {
    "JAX_PLATFORMS": "cpu",              # JAX computes on CPU; the TPU plugin is loaded only for the topology
    "DECOUPLE_GCLOUD": "TRUE",           # MaxText stubs Google Cloud services (GCS, Cloud Logging)
    "TPU_SKIP_MDS_QUERY": "1",           # libtpu does not wait for a GCE metadata server
    "ALLOW_MULTIPLE_LIBTPU_LOAD": "1",   # libtpu otherwise allows one process per machine (/tmp/libtpu_lockfile)
    "PYTHONUNBUFFERED": "1",
}


# ---------------------------------------------------------------------------------------------------
# What to compile


@dataclass(frozen=True)
class CompileTarget:
    """One backend's launch command for one TPU target."""

    argv: tuple[str, ...]            # as launched: MaxText's module, the base config, key=value ...
    source: str                      # the builder it came from
    generation: Generation
    topology: str                    # slice topology, e.g. "4x4"
    devices_per_slice: int
    slices: int
    plan: str                        # the planner's description of the plan this argv runs
    model: str = ""                  # core/presets.py name
    libtpu_init_args: str = ""
    estimate_bytes: int | None = None   # the planner's estimate per device, for the report
    # Which program of the run: the train step (train_compile) or the eval step at the argv's eval batch
    # (aot/eval_compile.py; core/compile_verdicts.py STEP_*).
    step: str = STEP_TRAIN

    @property
    def keys(self) -> dict[str, str]:
        return dict(item.partition("=")[::2] for item in self.argv[2:])

    def at_slices(self, slices: int, plan: str = "", estimate_bytes: int | None = None) -> "CompileTarget":
        """The same launch on another number of slices, as an elastic run resizes it: the DCN axis across the
        slices (data, or fsdp when FSDP spans them; core/planner.py Plan.at_slices) takes the new count, the rest
        of the argv and the pods' LIBTPU_INIT_ARGS stay (the pods that run the smaller group are the same)."""
        if slices == self.slices:
            return self
        keys = self.keys
        axis = "dcn_fsdp_parallelism" if int(keys.get("dcn_fsdp_parallelism", "1")) > 1 else "dcn_data_parallelism"
        argv = [*self.argv[:2]]
        for item in self.argv[2:]:
            key = item.partition("=")[0]
            argv.append(f"{key}={slices}" if key == axis else item)
        if f"{axis}={slices}" not in argv:
            argv.append(f"{axis}={slices}")
        return dataclasses.replace(self, argv=tuple(argv), slices=slices, plan=plan or self.plan,
                                   estimate_bytes=estimate_bytes)


    def with_keys(self, keys: Mapping[str, str], plan: str = "",
                  estimate_bytes: int | None = None) -> "CompileTarget":
        """The same launch with some MaxText keys set otherwise (another batch: the keys its plan changes)."""
        argv, seen = [*self.argv[:2]], set()
        for item in self.argv[2:]:
            key = item.partition("=")[0]
            argv.append(f"{key}={keys[key]}" if key in keys else item)
            seen.add(key)
        argv += [f"{key}={value}" for key, value in keys.items() if key not in seen]
        return dataclasses.replace(self, argv=tuple(argv), plan=plan or self.plan, estimate_bytes=estimate_bytes)


def loaded_eval_batch(keys: Mapping[str, str]) -> float | None:
    """The per-device batch of the eval step a MaxText argv's keys load: eval_per_device_batch_size, or where it is
    unset or 0 per_device_batch_size (MaxText 0.2.5 configs/types.py: "If eval_per_device_batch_size is not set,
    it defaults to the training per_device_batch_size", the `== 0.0` test beside it); None when the argv sets
    neither (the base config's values decide, unread here)."""
    own = float(keys.get("eval_per_device_batch_size") or 0)
    if own:
        return own
    train = keys.get("per_device_batch_size")
    return float(train) if train else None


def compile_topology(generation: Generation, topology: str, devices_per_slice: int) -> str:
    """MaxText's compile_topology name for one slice, looked up in MaxText's own table
    (maxtext/utils/accelerator_to_spec_map.py UserFacingNameToSystemCharacteristics: name "<generation>-<devices>",
    topology_name "<platform>:<topology>", e.g. "v6e-8" -> "v6e:2x4", "v5p-16" -> "v5:2x2x2")."""
    from maxtext.utils.accelerator_to_spec_map import UserFacingNameToSystemCharacteristics as table

    for name, spec in table.items():
        if (name.startswith(f"{generation.name}-") and spec.topology_name.split(":")[-1] == topology
                and spec.devices_per_slice == devices_per_slice):
            return name
    raise CompileSetupError(f"MaxText {installed('maxtext')} has no compile_topology for {generation.name} "
                            f"{topology} ({devices_per_slice} devices)")


class CompileSetupError(Exception):
    """The compile cannot be set up (not a MaxText/XLA verdict)."""


def compile_front_end():
    """The compile's interpreter and its versions (aot/compile_python.py); CompileSetupError if it cannot answer."""
    try:
        return front_end()
    except CompilePythonError as error:
        raise CompileSetupError(str(error)) from None


def missing_compiler() -> str | None:
    """One line naming the package the compile needs that is not installed under the compile's interpreter
    (aot/compile_python.py) and what installs it, or None."""
    try:
        front = compile_front_end()
    except CompileSetupError as error:
        return str(error)
    for package in ("maxtext", "libtpu"):
        if front.version(package) == NOT_INSTALLED:
            if front.named:
                return f"no {package} under {COMPILE_PYTHON_ENV}={front.executable}"
            # scripts/setup.sh installs both: libtpu pinned in requirements-trainer.txt, MaxText by
            # scripts/install_maxtext.sh (the README's setup).
            return f"no {package} here (bash scripts/setup.sh)"
    return None


def compile_libtpu():
    """The libtpu the compile loads (aot/workers_libtpu.py Found): the .so TPU_LIBRARY_PATH names when the user set
    it (jax then loads it instead of its own libtpu package), else the workers' pinned libtpu from the override or
    the user's cache, else the libtpu installed here, with the one line saying it is not the workers'."""
    from aot.workers_libtpu import Found, find, lock_pin, so_version

    so = os.environ.get("TPU_LIBRARY_PATH")
    if not so:
        return find(PROJECT_ROOT)
    version = so_version(Path(so))
    if version is None:
        raise CompileSetupError(f"TPU_LIBRARY_PATH={so}: no libtpu-*.dist-info next to it to say its version")
    pinned = lock_pin(PROJECT_ROOT).version
    return Found(Path(so), version, None if version == pinned else
                 f"TPU_LIBRARY_PATH: libtpu {version} compiled, not the workers' {pinned}")


def loaded_libtpu() -> str:
    """The version of the libtpu the compile loads (compile_libtpu)."""
    return compile_libtpu().version


def ray_target(entrypoint_args: Iterable[str], libtpu_args: str, root: Path = PROJECT_ROOT) -> CompileTarget:
    """The argv every Ray worker of the full worker group runs for `python -m trainer.entrypoint ARGS`."""
    from core.tpu_catalog import CATALOG

    command = [sys.executable, "-m", "trainer.entrypoint", *entrypoint_args, "--print-argv"]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(command, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        lines = (proc.stderr or proc.stdout).strip().splitlines()
        raise CompileSetupError(lines[-1] if lines else f"trainer.entrypoint exited with {proc.returncode}")
    printed = json.loads(proc.stdout.strip().splitlines()[-1])
    return CompileTarget(argv=tuple(printed["argv"]), source="ray: trainer.entrypoint --print-argv (trainer.worker)",
                         generation=CATALOG[printed["generation"]], topology=printed["topology"],
                         devices_per_slice=printed["devices_per_slice"], slices=printed["slices"],
                         plan=printed["plan"], model=printed["model"], libtpu_init_args=libtpu_args,
                         estimate_bytes=printed["estimate_bytes"])


# What the key of a verdict (core/compile_verdicts.CompileKey) has in place of this machine's scratch paths.
KEY_BASE_CONFIG, KEY_SCRATCH = "<maxtext>/configs/base.yml", Path("<scratch>")


def compile_key(target: CompileTarget, mode: str = "full") -> "CompileKey":
    """The complete key of XLA's verdict on `target`: train_compile's argv as run_compile runs it (scratch paths as
    placeholders), the pods' LIBTPU_INIT_ARGS, this process's XLA_FLAGS (they reach the compile), the MaxText,
    jax and libtpu versions that compile it (the compile's interpreter's, aot/compile_python.py, not
    necessarily this process's), the mode (core/compile_verdicts.py MODE_*) and the program (step)."""
    from core.compile_verdicts import CompileKey

    argv, _ = aot_argv(target, KEY_BASE_CONFIG, KEY_SCRATCH / "out")
    front = compile_front_end()
    return CompileKey(argv=tuple(argv), libtpu_init_args=target.libtpu_init_args,
                      xla_flags=os.environ.get("XLA_FLAGS", ""), maxtext=front.maxtext,
                      jax=front.jax, libtpu=loaded_libtpu(), mode=mode, step=target.step)


def aot_argv(target: CompileTarget, base_config: str, out_dir: Path) -> tuple[list[str], dict[str, str]]:
    """train_compile's argv for the target and the keys it leaves out ({key: why})."""
    local = {"base_output_directory": str(out_dir), "run_name": "preflight", "jax_cache_dir": ""}
    keys, dropped = [], {}
    for item in target.argv[2:]:
        key, _, value = item.partition("=")
        if key in AOT_DROPPED:
            dropped[key] = AOT_DROPPED[key]
            continue
        keys.append(f"{key}={local.get(key, value)}")
    name = compile_topology(target.generation, target.topology, target.devices_per_slice)
    keys += [f"compile_topology={name}", f"compile_topology_num_slices={target.slices}"]
    return [base_config, *keys], dropped


# ---------------------------------------------------------------------------------------------------
# Running it


@dataclass
class CompileResult:
    compiled: bool
    peak_bytes_per_device: int | None
    hbm_bytes: int | None
    topology: str
    num_slices: int
    seconds: float
    reason: str | None
    required_bytes: int | None = None
    before_remat_bytes: int | None = None
    source: str = ""
    plan: str = ""
    estimate_bytes: int | None = None
    dropped: Mapping[str, str] = field(default_factory=dict)
    breakdown: Mapping[str, int] = field(default_factory=dict)
    libtpu_init_args: str = ""
    command: str = ""
    argv: tuple[str, ...] = ()         # train_compile's argv (base config, key=value ...)
    libtpu: str = ""
    log: str | None = None
    assigned: Mapping[str, int] | None = None     # memory_assignment(): XLA's figures when its HLO passes ended
    memory_only: bool = False                     # stopped after memory assignment (no code generation)
    cached: bool = False                          # read from compile-verdicts.json, not compiled now
    key: Any = None                               # core.compile_verdicts.CompileKey it was compiled under
    timed_out_after_s: float | None = None        # ran out of time: no verdict ("undecided after N s")
    mode: str = "full"                            # core/compile_verdicts.py MODE_* (aot/kernel_check.py)
    kernels: str | None = None                    # the attention kernels' own verdict (aot/kernel_check.py)
    step: str = STEP_TRAIN                        # which program (CompileTarget.step)

    @property
    def keys(self) -> dict[str, str]:
        """The MaxText keys of its argv (after the base config), as CompileTarget.keys reads a launch's."""
        return dict(item.partition("=")[::2] for item in self.argv[1:])

    @property
    def error_code(self) -> str | None:
        """XLA's error code of a refusal ("E1000 CompileTimeHbmOom", "E1001 CompileTimeScopedVmemOom"), or None."""
        from core.compile_verdicts import error_code
        return None if self.compiled else error_code(self.reason)

    @property
    def fits(self) -> bool:
        return self.compiled

    def version(self, package: str) -> str:
        """maxtext's or jax's version under the interpreter that compiled it (its key), not necessarily ours."""
        return getattr(self.key, package) if self.key is not None else installed(package)

    def as_dict(self) -> dict[str, Any]:
        return {
            "compiled": self.compiled, "peak_bytes_per_device": self.peak_bytes_per_device,
            "hbm_bytes": self.hbm_bytes, "topology": self.topology, "num_slices": self.num_slices,
            "seconds": round(self.seconds, 1), "reason": self.reason, "required_bytes": self.required_bytes,
            "before_remat_bytes": self.before_remat_bytes,
            "estimate_bytes_per_device": self.estimate_bytes, "breakdown": dict(self.breakdown),
            "argv_source": self.source, "dropped": dict(self.dropped), "libtpu_init_args": self.libtpu_init_args,
            "command": self.command, "libtpu": self.libtpu, "log": self.log, "maxtext": self.version("maxtext"),
            "jax": self.version("jax"),
            "error_code": self.error_code, "cached": self.cached, "mode": self.mode, "kernels": self.kernels,
            "step": self.step,
        }


def verdict_of(result: CompileResult, resized, eval_batch: float | None = None) -> "Verdict":
    """XLA's verdict in a compile's result, as compile-verdicts.json keeps it (resized: the core.planner.Plan at the
    compiled slice count; eval_batch: the per-device batch of the eval step compiled, None for the train step)."""
    from core.compile_verdicts import Verdict
    return Verdict(compiled=result.compiled, shape=resized.describe().split(";")[0], slices=result.num_slices,
                   libtpu=result.libtpu, maxtext=result.version("maxtext"), reason=result.reason,
                   error_code=result.error_code, required_bytes=result.required_bytes,
                   peak_bytes=result.peak_bytes_per_device, hbm_bytes=result.hbm_bytes,
                   per_device_batch_size=resized.per_device_batch_size if eval_batch is None else eval_batch,
                   jax=result.version("jax"), undecided_after_s=result.timed_out_after_s, mode=result.mode,
                   step=result.step)


def decided(result: CompileResult) -> bool:
    """Whether the result is XLA's own verdict: it compiled, or XLA refused it (its bytes or its error code), not a
    compile that was stopped, timed out or failed for another reason (a timeout is kept as undecided: kept())."""
    return result.compiled or bool(result.required_bytes) or bool(result.error_code)


def kept(result: CompileResult) -> bool:
    """Whether compile-verdicts.json keeps the result: XLA's verdict, or a compile that ran out of time (kept as
    "undecided after N s", so that the next preview does not silently start it again)."""
    return decided(result) or result.timed_out_after_s is not None


def expected_time(model: str, memory_only: bool = False) -> str:
    """About how long one compile of `model` takes on this machine, from the compiles kept in
    core/xla_calibration.json (their `seconds`, on this project's 2-core machine): the median of that model's rows
    of the same mode, else "time not measured for MODEL"."""
    path = PROJECT_ROOT / "core" / "xla_calibration.json"
    try:
        rows = json.loads(path.read_text())["rows"]
    except (OSError, ValueError, KeyError):
        rows = []
    seconds = sorted(row["seconds"] for row in rows if row.get("model") == model and row.get("seconds")
                     and bool(row.get("memory_only")) == memory_only)
    if not seconds:
        return f"time not measured for {model}"
    return f"about {_clock(seconds[len(seconds) // 2])} each here (xla_calibration.json)"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


class _Ticker:
    """Elapsed time to stderr while the compile runs: rewritten in place on a terminal, a line every 30 s else."""

    def __init__(self, label: str, out: TextIO | None, interval: float | None = None):
        self.label, self.out, self.last = label, out, ""
        self.start = time.monotonic()
        self.stop = threading.Event()
        self.tty = bool(out is not None and hasattr(out, "isatty") and out.isatty())
        self.interval = interval or (1.0 if self.tty else 30.0)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(self.interval):
            line = f"compile: {self.label}: {_clock(time.monotonic() - self.start)} elapsed"
            if self.last:
                line += f" ({self.last[:70]})"
            if self.tty:
                self.out.write("\r\033[K" + line)
            else:
                self.out.write(line + "\n")
            self.out.flush()

    def __enter__(self) -> "_Ticker":
        if self.out is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        if self.out is not None:
            self.thread.join()
            if self.tty:
                self.out.write("\r\033[K")
                self.out.flush()


def _progress_line(line: str) -> str | None:
    """MaxText's own stage messages, for the ticker."""
    for marker in ("Starting train_compile", "Jitting and compiling", "Jitting and compilation complete"):
        if marker in line:
            return line.strip()
    return None


MEMORY_ONLY_GRACE_S = 20.0


class CompileStopped(BaseException):
    """SIGTERM arrived while a compile ran (raised in the main thread, like KeyboardInterrupt for Ctrl-C)."""


@contextlib.contextmanager
def _stop_on_sigterm():
    """While the compile runs, SIGTERM raises CompileStopped in the main thread, so that run_compile stops the
    compile's process group before this process exits (the default action would end this process alone and
    leave train_compile compiling for minutes). Elsewhere than the main thread signals cannot be handled."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        raise CompileStopped(f"stopped by signal {signum}")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop_group(proc: subprocess.Popen) -> None:
    """Kill the compile and everything it started (its process group, see run_compile)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


EVAL_COMPILE = Path(__file__).with_name("eval_compile.py")


def step_program(target: CompileTarget, python: str) -> tuple[str, ...]:
    """The command before the argv that compiles the target's step under `python` (aot/compile_python.py's
    interpreter): MaxText's train_compile for the train step, aot/eval_compile.py for the eval step. Where the test
    suite points the compile at a module that does not exist (AOT_MODULE_ENV, tests/conftest.py), so does every
    step's compile: no real compile."""
    module = os.environ.get(AOT_MODULE_ENV)
    if target.step == STEP_EVAL and not module:
        return python, str(EVAL_COMPILE)
    return python, "-m", module or AOT_MODULE


def run_compile(target: CompileTarget, *, timeout: float = DEFAULT_TIMEOUT_S, progress: TextIO | None = None,
                keep_dir: Path | None = None, compiler: tuple[str, ...] | None = None,
                tick_s: float | None = None, memory_only: bool = False) -> CompileResult:
    """Compile `target` in a subprocess; the scratch directory is removed unless the compile failed (its
    output and libtpu's log are then kept there) or `keep_dir` is given. `compiler`: the command before the argv
    (default step_program: train_compile, or aot/eval_compile.py for an eval step; tests pass a stand-in).
    `memory_only`: stop once XLA's HLO passes have assigned memory (HLO_PASSES_DONE in libtpu's log) instead of
    generating code for every fusion; the result then carries XLA's memory figures at that point (`assigned`), no peak. It
    runs under aot/compile_python.py's interpreter (COMPILE_PYTHON_ENV, else this one), with that MaxText's
    base.yml."""
    missing = missing_compiler()
    if missing:
        raise CompileSetupError(missing)
    front = compile_front_end()
    base_config = front.base_config
    work = Path(tempfile.mkdtemp(prefix="preflight-")) if keep_dir is None else keep_dir
    work.mkdir(parents=True, exist_ok=True)
    log_dir, out_dir = work / "libtpu_logs", work / "out"
    log_dir.mkdir(exist_ok=True)
    argv, dropped = aot_argv(target, base_config, out_dir)
    key = compile_key(target)
    env = {**os.environ, **COMPILE_ENV, "TPU_LOG_DIR": str(log_dir), "LIBTPU_INIT_ARGS": target.libtpu_init_args}
    libtpu = compile_libtpu()
    if libtpu.so is not None:      # the workers' libtpu (or the user's TPU_LIBRARY_PATH), not jax[tpu]'s own
        env["TPU_LIBRARY_PATH"] = str(libtpu.so)
    env.pop("PYTHONPATH", None)
    program = compiler or step_program(target, front.executable)
    command = [*program, *argv]
    # Started through aot/guard.py (a file, not `-m`: the compile runs without PYTHONPATH): the guard gets a
    # parent-death signal and then ends the whole compile, so a program killed by SIGKILL leaves no compile behind.
    guard = [sys.executable, str(Path(__file__).with_name("guard.py"))]
    name = argv[-2].partition("=")[2]
    output_path = work / "compile.log"
    start = time.monotonic()
    returncode: int | None = None
    label = f"{name} x {target.slices}" + (" eval step" if target.step == STEP_EVAL else "")
    with open(output_path, "w") as output, _Ticker(label, progress, tick_s) as ticker:
        # Its own process group: train_compile may start helpers of its own, and a stop (timeout, Ctrl-C,
        # SIGTERM) must end them all, not only the direct child.
        from aot.guard import parent_death_preexec
        proc = subprocess.Popen([*guard, *command], env=env, cwd=work, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True,
                                preexec_fn=parent_death_preexec())
        timed_out = threading.Event()

        def expire() -> None:
            timed_out.set()
            _stop_group(proc)

        timer = threading.Timer(timeout, expire)
        timer.start()
        assigned_event = threading.Event()

        def watch() -> None:
            """memory_only: stop the compile once memory is assigned, after a grace period in which a step that
            does not fit fails with RESOURCE_EXHAUSTED (buffer assignment follows the HLO passes)."""
            seen = None
            while proc.poll() is None:
                if seen is None:
                    text = "".join(path.read_text(errors="replace") for path in sorted(log_dir.glob("*.INFO.*")))
                    assigned_now = memory_assignment(text)
                    if assigned_now is not None and over_the_limit(assigned_now):
                        return        # XLA refuses it: let it end with its own RESOURCE_EXHAUSTED
                    if assigned_now is not None:
                        seen = time.monotonic()
                elif time.monotonic() - seen > MEMORY_ONLY_GRACE_S:
                    assigned_event.set()
                    _stop_group(proc)
                    return
                time.sleep(1.0)

        watcher = threading.Thread(target=watch, daemon=True)
        if memory_only:
            watcher.start()
        try:
            with _stop_on_sigterm():
                assert proc.stdout is not None
                for line in proc.stdout:
                    output.write(line)
                    stage = _progress_line(line)
                    if stage:
                        ticker.last = stage
                proc.wait()
        except BaseException:
            # Ctrl-C no longer reaches the compile by itself (its own process group), nor does SIGTERM.
            _stop_group(proc)
            proc.wait()
            raise
        finally:
            timer.cancel()
        killed = timed_out.is_set()
        returncode = None if killed else proc.returncode
    seconds = time.monotonic() - start
    text = output_path.read_text(errors="replace")
    libtpu_log = "".join(path.read_text(errors="replace") for path in sorted(log_dir.glob("*.INFO.*")))
    verdict = parse_compiler_output(text, libtpu_log, returncode)
    reason = verdict.reason
    assigned = memory_assignment(libtpu_log)
    if killed:
        reason = f"the compile did not finish within {timeout:.0f} s"
    elif memory_only and assigned_event.is_set() and assigned is not None and not over_the_limit(assigned):
        # Memory assigned without RESOURCE_EXHAUSTED: XLA fits the step; code generation was not run.
        verdict = dataclasses.replace(verdict, compiled=True,
                                      before_remat_bytes=assigned["need"] if "after" in assigned else None)
        reason = None
    result = CompileResult(
        compiled=verdict.compiled, peak_bytes_per_device=verdict.peak_bytes_per_device, hbm_bytes=verdict.hbm_bytes,
        topology=name, num_slices=target.slices, seconds=seconds, reason=reason,
        required_bytes=verdict.required_bytes, before_remat_bytes=verdict.before_remat_bytes, source=target.source,
        plan=target.plan, estimate_bytes=target.estimate_bytes, dropped=dropped, breakdown=verdict.breakdown,
        libtpu_init_args=target.libtpu_init_args,
        command=" ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(COMPILE_ENV.items()) if k != "PYTHONUNBUFFERED")
        + (f" LIBTPU_INIT_ARGS={shlex.quote(target.libtpu_init_args)}" if target.libtpu_init_args else "")
        + (f" TPU_LIBRARY_PATH={shlex.quote(str(libtpu.so))}" if libtpu.so is not None else "")
        + " " + shlex.join([front.executable if front.named else "python", *program[1:], *argv]),
        argv=tuple(argv), libtpu=key.libtpu, assigned=assigned, memory_only=memory_only, key=key,
        timed_out_after_s=round(timeout) if killed else None, step=target.step)
    if verdict.compiled and keep_dir is None:
        shutil.rmtree(work, ignore_errors=True)
    else:
        result.log = str(output_path)
    return result
