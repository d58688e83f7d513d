"""The start train_compile.main gives a compile, shared by the project's own compile programs
(aot/train_compile_start.py, used by aot/kernel_compile.py and aot/eval_compile.py).

Each program is run as run_compile runs it (a file, the project not on the path, no PYTHONPATH of the project's;
here also `python -P`, so nothing but the file's own directory can find the shared module) against stand-ins for
jax, flax and MaxText that record what the start did and stop the program there: no real compile, a fraction of a
second. The real programs under the real MaxText are the `-m compile` tests (tests/preview/test_kernel_check.py).
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

# Stand-ins: just the names the programs import before and during the start. The topology mesh is where the start
# has ended in both programs; the stand-in records the process's state there and ends it.
STAND_INS = {
    "jax/__init__.py": (
        "from types import SimpleNamespace\n"
        "updates = {}\n"
        "config = SimpleNamespace(update=lambda name, value: updates.__setitem__(name, value))\n"),
    "flax/__init__.py": "",
    "flax/core/__init__.py": "",
    "flax/core/spmd.py": "logical_axis_rules = None\n",
    "maxtext/__init__.py": "",
    "maxtext/configs/__init__.py": "",
    "maxtext/configs/pyconfig.py": (
        "from types import SimpleNamespace\n"
        "def initialize(argv):\n"
        "    return SimpleNamespace(argv=list(argv), validated=False, enable_diloco=False,\n"
        "                           eval_ragged_buffer_factor=0)\n"),
    "maxtext/trainers/__init__.py": "",
    "maxtext/trainers/pre_train/__init__.py": "",
    "maxtext/trainers/pre_train/train_compile.py": (
        "import json, os, sys\n"
        "import jax\n"
        "def validate_config(config):\n"
        "    config.validated = True\n"
        "def get_topology_mesh(config):\n"
        "    json.dump({'argv': config.argv[1:], 'validated': config.validated, 'prng': jax.updates,\n"
        "               'libtpu_init_args': os.environ['LIBTPU_INIT_ARGS']}, open(os.environ['START_RECORD'], 'w'))\n"
        "    sys.exit(0)\n"),
}
PODS_FLAGS = "--xla_tpu_scoped_vmem_limit_kib=98304"


def _started(tmp_path: Path, program: str, *argv: str) -> tuple[dict, str]:
    stand_ins = tmp_path / "stand_ins"
    for name, text in STAND_INS.items():
        (stand_ins / name).parent.mkdir(parents=True, exist_ok=True)
        (stand_ins / name).write_text(text)
    record = tmp_path / "start.json"
    env = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(stand_ins), "START_RECORD": str(record),
           "LIBTPU_INIT_ARGS": PODS_FLAGS}
    done = subprocess.run([sys.executable, "-P", str(REPO / "aot" / program), *argv], env=env, cwd=tmp_path,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(record.read_text()), done.stdout


@pytest.mark.parametrize("program, argv, announced", [
    ("kernel_compile.py", ("base.yml", "per_device_batch_size=4"), "the attention kernels' compile"),
    ("kernel_compile.py", ("--eval", "base.yml", "per_device_batch_size=4"), "the attention kernels' compile"),
    ("eval_compile.py", ("base.yml", "per_device_batch_size=4"), "the eval step's compile"),
])
def test_each_compile_program_starts_as_train_compile_main_does(tmp_path, program, argv, announced):
    """MaxText 0.2.5 trainers/pre_train/train_compile.py main: the unsafe_rbg PRNG, the SPMD RNG flag appended to
    the pods' LIBTPU_INIT_ARGS, then the config from the argv, validated (kernel_compile's --eval is its own)."""
    started, said = _started(tmp_path, program, *argv)
    assert started == {"argv": ["base.yml", "per_device_batch_size=4"], "validated": True,
                       "prng": {"jax_default_prng_impl": "unsafe_rbg"},
                       "libtpu_init_args": PODS_FLAGS + " --xla_tpu_spmd_rng_bit_generator_unsafe=true"}
    assert f"Starting {announced} (aot/{program})..." in said


def test_the_shared_start_is_train_compile_mains_own():
    """The lines aot/train_compile_start.py copies in behaviour are in the installed MaxText's train_compile.main
    (read as text: importing MaxText takes seconds)."""
    maxtext = Path(importlib.util.find_spec("maxtext").origin).parent
    source = (maxtext / "trainers" / "pre_train" / "train_compile.py").read_text()
    main = source[source.index("def main("):]
    assert 'jax.config.update("jax_default_prng_impl", "unsafe_rbg")' in main
    assert '" --xla_tpu_spmd_rng_bit_generator_unsafe=true"' in main
    assert "parse_libtpu_flags_to_dict(config.compile_xla_flags)" in source
    assert 'print("Jitting and compilation complete!", flush=True)' in source


def test_the_start_is_spelled_once_in_the_project():
    """Only aot/train_compile_start.py sets the PRNG and the flag: a compile program that spells them again (a twin
    that can drift from train_compile.main) fails here."""
    spelled = [path.relative_to(REPO).as_posix() for path in sorted((REPO / "aot").glob("*.py"))
               if "jax_default_prng_impl" in path.read_text()
               or "xla_tpu_spmd_rng_bit_generator_unsafe" in path.read_text()]
    assert spelled == ["aot/train_compile_start.py"]
