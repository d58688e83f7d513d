"""Does libtpu accept the LIBTPU_INIT_ARGS every backend sends? Check, and record the answer in core/recipes.py.

For every TPU preset x generation x {1 slice, 2 slices}, the flags are core.tpu_env.libtpu_init_args(...) with two
DCN NICs, exactly what the Ray and JobSet pods get. A child process compiles ahead of time, without a TPU
(jax.experimental.topologies), one FSDP train step of a small layer (weights sharded, all-gathered, gradients
reduced) for that many slices of the generation's smallest topology under LIBTPU_INIT_ARGS=<flags>. libtpu exits
with "ERROR: Unknown command line flag" on a flag it does not know, and refuses some combinations only when it
compiles (the continuation fusion for all-gathers on TPUs other than v5e, libtpu >= 0.0.43.2), hence the compile.
Evidence cases follow (recorded, not judged): each recipe's flags as published, and each flag set core/recipes.py
leaves out added to what we send, which is why those are left out.

This proves that libtpu takes the flags and compiles with them, not that they make MaxText faster.

    python scripts/libtpu_flag_check.py                      # the libtpu installed with this interpreter's jax
    python scripts/libtpu_flag_check.py --libtpu-so DIR/libtpu/libtpu.so   # another libtpu, through TPU_LIBRARY_PATH
    python scripts/libtpu_flag_check.py --python /venv/bin/python           # another interpreter (with jax)
    ... --write     # replace the rows of that libtpu version in core/recipes.py LIBTPU_CHECKS

libtpu's .so does not depend on the Python version; jax 0.10.2 loads the workers' (libtpu 0.0.50.1's) through TPU_LIBRARY_PATH.
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# jax.experimental.topologies names for the smallest slice of each generation in core/tpu_catalog.py.
PROBE_TOPOLOGY = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2", "tpu7x": "tpu7x:2x2x1"}
PROBE_NICS = 2
# Environment of the probe: libtpu's lockfile allows one process per machine unless told otherwise, and it would
# wait for a GCE metadata server and guess worker hostnames without these.
PROBE_ENV = {"ALLOW_MULTIPLE_LIBTPU_LOAD": "1", "TPU_SKIP_MDS_QUERY": "1", "TPU_WORKER_HOSTNAMES": "localhost",
             "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
_MARK = "LIBTPU_PROBE "


# ----------------------------------------------------------------------------------------------- child process
def _probe(topology: str, slices: int) -> None:
    """Compile one FSDP train step for `slices` x `topology`; print the verdict line. Runs under any jax."""
    import glob
    import importlib.metadata

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    so = os.environ.get("TPU_LIBRARY_PATH")
    if so:
        infos = glob.glob(str(Path(so).resolve().parents[1] / "libtpu-*.dist-info"))
        version = Path(infos[0]).name.removeprefix("libtpu-").removesuffix(".dist-info") if infos else "unknown"
    else:
        version = importlib.metadata.version("libtpu")
    devices = topologies.get_topology_desc(platform="tpu", topology_name=topology, num_slices=slices).devices
    mesh = Mesh(np.array(devices).reshape(slices, -1), ("data", "fsdp"))

    def loss(w, x):
        return jnp.mean(jnp.tanh(x @ w) ** 2)

    step = jax.jit(jax.value_and_grad(loss),
                   out_shardings=(NamedSharding(mesh, P()), NamedSharding(mesh, P("fsdp", None))))
    w = jax.ShapeDtypeStruct((512, 1024), jnp.bfloat16, sharding=NamedSharding(mesh, P("fsdp", None)))
    x = jax.ShapeDtypeStruct((len(devices) * 64, 512), jnp.bfloat16,
                             sharding=NamedSharding(mesh, P(("data", "fsdp"), None)))
    step.lower(w, x).compile()
    print(_MARK + json.dumps({"ok": True, "libtpu": version, "device_kind": devices[0].device_kind}), flush=True)


# ---------------------------------------------------------------------------------------------- parent process
@dataclass(frozen=True)
class Case:
    what: str          # why this flag set is checked (for the report)
    generation: str
    slices: int
    flags: str
    expect_ok: bool | None     # None: evidence, recorded whatever libtpu says


@dataclass(frozen=True)
class Result:
    case: Case
    libtpu: str
    verdict: str       # "OK" or libtpu's first error line

    @property
    def ok(self) -> bool:
        return self.verdict == "OK"


def emitted_cases() -> list[Case]:
    """What the pods get: every TPU preset x generation x {1, 2} slices, deduplicated by (generation, slices, flags)."""
    sys.path.insert(0, str(ROOT))
    from core.presets import PRESETS
    from core.tpu_catalog import CATALOG
    from core.tpu_env import libtpu_init_args

    sends: dict[tuple[str, int, str], list[str]] = {}
    for name, preset in PRESETS.items():
        if preset.cpu_only:
            continue
        for generation in CATALOG:
            for slices in (1, 2):
                flags = libtpu_init_args(name, CATALOG[generation], slices, PROBE_NICS)
                sends.setdefault((generation, slices, flags), []).append(name)
    return [Case(f"{', '.join(names)} send", generation, slices, flags, True)
            for (generation, slices, flags), names in sends.items()]


def evidence_cases() -> list[Case]:
    """Why flags are left out: the recipe as published, and each left-out set added to what we send."""
    sys.path.insert(0, str(ROOT))
    from core.recipes import RECIPES
    from core.tpu_catalog import CATALOG
    from core.tpu_env import libtpu_init_args

    cases = []
    for recipe in RECIPES:
        published = " ".join(flag for group in recipe.flag_groups for flag in group.flags)
        cases.append(Case(f"{recipe.preset} recipe as published", recipe.generation, 1, published, None))
        ours = libtpu_init_args(recipe.preset, CATALOG[recipe.generation], 1)
        for item in recipe.left_out:
            cases.append(Case(f"{recipe.preset} + left out {item.flags[0]}", recipe.generation, 1,
                              " ".join((ours, *item.flags)), None))
    return cases


def _verdict(returncode: int, output: str) -> tuple[str, str]:
    """(libtpu version or "", "OK" or the first line that explains the failure)."""
    for line in output.splitlines():
        if line.startswith(_MARK) and returncode == 0:
            report = json.loads(line[len(_MARK):])
            return report["libtpu"], "OK"
    patterns = (r"ERROR: Unknown command line flag.*", r"FAILED_PRECONDITION:.*", r"INVALID_ARGUMENT:.*",
                r"Check failed:.*", r"\w*Error:.*")
    for pattern in patterns:
        for line in output.splitlines():
            match = re.search(pattern, line)
            if match and "worker hostname" not in line:
                return "", match.group(0).strip()[:150]
    tail = [line for line in output.splitlines() if line.strip()]
    return "", (tail[-1][:150] if tail else f"exit {returncode}, no output")


def run_case(case: Case, python: str = sys.executable, libtpu_so: str | None = None,
             timeout: float = 300) -> Result:
    env = {k: v for k, v in os.environ.items() if k not in ("LIBTPU_INIT_ARGS", "TPU_LIBRARY_PATH", "XLA_FLAGS")}
    env.update(PROBE_ENV, LIBTPU_INIT_ARGS=case.flags)
    if libtpu_so:
        env["TPU_LIBRARY_PATH"] = libtpu_so
    command = [python, str(Path(__file__).resolve()), "--probe", PROBE_TOPOLOGY[case.generation], str(case.slices)]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Result(case, "", f"timed out after {timeout:.0f} s")
    version, verdict = _verdict(done.returncode, done.stdout + "\n" + done.stderr)
    return Result(case, version, verdict)


def libtpu_version(python: str = sys.executable, libtpu_so: str | None = None) -> str:
    """The version the probe would load: from the dist-info next to `libtpu_so`, or the interpreter's package."""
    if libtpu_so:
        infos = sorted(Path(libtpu_so).resolve().parents[1].glob("libtpu-*.dist-info"))
        return infos[0].name.removeprefix("libtpu-").removesuffix(".dist-info") if infos else ""
    done = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('libtpu'))"],
                          capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def run_cases(cases: list[Case], python: str = sys.executable, libtpu_so: str | None = None,
              workers: int = 2) -> list[Result]:
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda case: run_case(case, python, libtpu_so), cases))


# --------------------------------------------------------------------------------------- the committed table
_BEGIN = "# BEGIN LIBTPU_CHECKS"
_END = "# END LIBTPU_CHECKS"


def write_checks(results: list[Result], version: str, path: Path = ROOT / "core" / "recipes.py") -> None:
    """Replace the LIBTPU_CHECKS rows of `version` in core/recipes.py, keeping the other versions' rows."""
    sys.path.insert(0, str(ROOT))
    from core.recipes import LIBTPU_CHECKS, LibtpuCheck

    kept = [row for row in LIBTPU_CHECKS if row.libtpu != version]
    new = [LibtpuCheck(version, PROBE_TOPOLOGY[r.case.generation], r.case.slices, r.case.what,
                       LibtpuCheck.digest(r.case.flags), r.verdict) for r in results]
    rows = sorted(kept + new, key=lambda r: (r.libtpu, r.topology, r.slices, r.what))
    text = path.read_text()
    head, rest = text.split(_BEGIN, 1)
    _, tail = rest.split(_END, 1)
    others = [line for line in rest.split("\n") if line.startswith("# libtpu ") and f"libtpu {version} " not in line]
    body = [f"{_BEGIN} (written by `python scripts/libtpu_flag_check.py --write`; do not edit by hand)", *others,
            f"# libtpu {version} rows: {datetime.date.today().isoformat()}, {len(new)} probes, "
            f"{sum(r.ok for r in new)} OK.",
            "LIBTPU_CHECKS: tuple[LibtpuCheck, ...] = ("]
    body += [f"    LibtpuCheck({r.libtpu!r}, {r.topology!r}, {r.slices}, {r.what!r}, {r.flags_sha256!r},\n"
             f"                {r.verdict!r})," for r in rows]
    body.append(")")
    path.write_text(head + "\n".join(body) + "\n" + _END + tail)


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(ROOT))
    from core.cli_errors import OneLineParser

    parser = OneLineParser(prog="python scripts/libtpu_flag_check.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--probe", nargs=2, metavar=("TOPOLOGY", "SLICES"), help=argparse.SUPPRESS)
    parser.add_argument("--python", default=sys.executable, help="interpreter with jax (default: this one)")
    parser.add_argument("--libtpu-so", help="libtpu.so to load instead of the interpreter's libtpu package")
    parser.add_argument("--write", action="store_true", help="record the results in core/recipes.py")
    args = parser.parse_args(argv)
    if args.probe:
        _probe(args.probe[0], int(args.probe[1]))
        return 0
    version = libtpu_version(args.python, args.libtpu_so)
    if not version:
        print("no libtpu found (install it, or pass --libtpu-so / --python)", file=sys.stderr)
        return 2
    results = run_cases(emitted_cases() + evidence_cases(), args.python, args.libtpu_so)
    wrong = 0
    for r in results:
        as_expected = r.case.expect_ok is None or r.ok == r.case.expect_ok
        wrong += not as_expected
        mark = "info" if r.case.expect_ok is None else "ok  " if as_expected else "FAIL"
        print(f"{mark} libtpu {r.libtpu or version} {r.case.generation} x{r.case.slices} "
              f"{r.case.what}: {r.verdict}")
    if args.write:
        write_checks(results, version)
    print(f"libtpu {version}: {len(results)} flag sets, {wrong} not as expected")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
