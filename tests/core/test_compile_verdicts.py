"""A verdict's key is everything that changes the compiled program or the compiler's answer
(core/compile_verdicts.py CompileKey, built by aot/runner.py compile_key from the program's compile target):
each of them changing gives another key, a look-up never takes a verdict recorded under another, and a file of an
older format is read as no verdict with one line, never a crash."""
from __future__ import annotations

import dataclasses
import json

import pytest

from aot import compile_python, runner
from core import compile_verdicts
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.compile_check import ProgramCompiler


@pytest.fixture(scope="module")
def dev_target():
    config = build({**load_stack_config("dev", REPO), "perDeviceBatchSize": "9"})
    return config, ProgramCompiler().target(config, 1)


def _versions(monkeypatch, maxtext="0.2.5", jax="0.10.2", libtpu="0.0.50.1"):
    monkeypatch.setattr(runner, "installed", {"maxtext": maxtext, "jax": jax, "libtpu": libtpu}.get)
    monkeypatch.setattr(runner, "loaded_libtpu", lambda: libtpu)
    # The compile's interpreter's versions (aot/compile_python.py), which the key takes.
    front = dataclasses.replace(compile_python.front_end(), versions=(
        ("jax", jax), ("jaxlib", jax), ("maxtext", maxtext), ("libtpu", libtpu)))
    monkeypatch.setattr(runner, "front_end", lambda: front)


# Each row changes one thing the key must cover; the key must change.
CHANGES = {
    "an argv override": lambda t, mp: t.with_keys({"sa_block_q": "1024"}),
    "a changed argv value": lambda t, mp: t.with_keys({"remat_policy": "minimal"}),
    "the slice count": lambda t, mp: t.at_slices(2) if t.slices == 1 else t.at_slices(1),
    "LIBTPU_INIT_ARGS": lambda t, mp: dataclasses.replace(
        t, libtpu_init_args=t.libtpu_init_args + " --xla_tpu_scoped_vmem_limit_kib=98304"),
    "XLA_FLAGS": lambda t, mp: mp.setenv("XLA_FLAGS", "--xla_dump_to=/nowhere") or t,
    "the MaxText version": lambda t, mp: _versions(mp, maxtext="0.2.6") or t,
    "the jax version": lambda t, mp: _versions(mp, jax="0.12.0.1") or t,
    "the libtpu version": lambda t, mp: _versions(mp, libtpu="0.0.42.1") or t,
}


@pytest.mark.parametrize("change", CHANGES)
def test_each_thing_that_changes_the_program_changes_the_key(change, dev_target, monkeypatch, tmp_path):
    config, target = dev_target
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    _versions(monkeypatch)
    before = runner.compile_key(target)
    changed_target = CHANGES[change](target, monkeypatch)
    after = runner.compile_key(changed_target)
    assert after.digest() != before.digest(), change
    # A verdict recorded under the old key is not the new key's verdict.
    path = tmp_path / "verdicts.json"
    verdict = compile_verdicts.Verdict(compiled=False, shape="dev", slices=1, libtpu="0.0.50.1", maxtext="0.2.5",
                                       error_code="E1000 CompileTimeHbmOom")
    compile_verdicts.record(path, before, verdict)
    verdicts = compile_verdicts.load(path)
    assert compile_verdicts.lookup(verdicts, before) is not None
    assert compile_verdicts.lookup(verdicts, after) is None


def test_the_same_step_on_another_machine_has_the_same_key(dev_target, monkeypatch):
    """Scratch paths are placeholders: the key does not change with where the compile's scratch directory is."""
    config, target = dev_target
    _versions(monkeypatch)
    key = runner.compile_key(target)
    assert "base_output_directory=<scratch>/out" in key.argv and key.argv[0] == runner.KEY_BASE_CONFIG
    assert runner.compile_key(ProgramCompiler().target(config, 1)) == key


def test_a_look_up_checks_the_whole_key_not_only_the_digest(tmp_path):
    """An entry whose recorded key differs from the asked key (a hand-edited or colliding digest) is no verdict."""
    key = compile_verdicts.CompileKey(argv=("base.yml", "a=1"), libtpu_init_args="", xla_flags="",
                                      maxtext="0.2.5", jax="0.10.2", libtpu="0.0.50.1")
    other = dataclasses.replace(key, libtpu="0.0.42.1")
    verdict = compile_verdicts.Verdict(compiled=True, shape="s", slices=1, libtpu="0.0.42.1", maxtext="0.2.5")
    forged = {key.digest(): dataclasses.replace(verdict, key=other.as_dict())}
    assert compile_verdicts.lookup(forged, key) is None


@pytest.mark.parametrize("content", [
    '{"about": "old", "verdicts": {"0123": {"compiled": true, "shape": "s", "slices": 1, "libtpu": "0.0.42.1",'
    ' "maxtext": "0.2.5"}}}',
    "not json {",
    "[1, 2]",
])
def test_an_old_or_broken_file_is_no_verdict_with_one_line(content, tmp_path):
    path = tmp_path / "compile-verdicts.json"
    path.write_text(content)
    verdicts, note = compile_verdicts.read(path)
    assert verdicts == {} and note is not None and "\n" not in note and len(note) <= 100, note
    # Recording replaces what could not be read, under the current format.
    key = compile_verdicts.CompileKey(argv=("b",), libtpu_init_args="", xla_flags="", maxtext="m", jax="j",
                                      libtpu="l")
    compile_verdicts.record(path, key, compile_verdicts.Verdict(compiled=True, shape="s", slices=1, libtpu="l",
                                                                maxtext="m"))
    document = json.loads(path.read_text())
    assert document["format"] == compile_verdicts.FORMAT and list(document["verdicts"]) == [key.digest()]
    assert compile_verdicts.read(path)[1] is None


def _key(mode: str = compile_verdicts.MODE_FULL) -> compile_verdicts.CompileKey:
    return compile_verdicts.CompileKey(argv=("base.yml", "a=1"), libtpu_init_args="--f=1", xla_flags="",
                                       maxtext="0.2.5", jax="0.10.2", libtpu="0.0.50.1", mode=mode)


def test_the_mode_is_part_of_the_key_and_a_full_key_keeps_its_digest_from_before_modes(tmp_path):
    """Memory-only + kernels and the full compile are kept apart; a full compile's key is the key as it was
    before modes existed (compile-verdicts.json entries recorded then, all full compiles, stay found)."""
    full, fast = _key(), _key(compile_verdicts.MODE_MEMORY_KERNELS)
    assert full.digest() != fast.digest() and fast.as_dict()["mode"] == compile_verdicts.MODE_MEMORY_KERNELS
    before_modes = {field: value for field, value in dataclasses.asdict(full).items()
                    if field not in ("mode", "step")}
    before_modes["argv"] = list(full.argv)
    assert full.as_dict() == before_modes


def test_a_full_compile_s_verdict_stands_for_the_faster_mode_never_the_reverse(tmp_path):
    """A full compile decided everything the faster mode decides: its verdict is used for a memory-only + kernels
    look-up. The faster mode's verdict is never used for a full compile's look-up, and a full compile that ran
    out of time does not stop the faster mode from deciding."""
    full, fast = _key(), _key(compile_verdicts.MODE_MEMORY_KERNELS)
    verdict = compile_verdicts.Verdict(compiled=False, shape="s", slices=1, libtpu="0.0.50.1", maxtext="0.2.5",
                                       error_code="E1001 CompileTimeScopedVmemOom")
    path = tmp_path / "compile-verdicts.json"
    compile_verdicts.record(path, full, verdict)
    assert compile_verdicts.lookup(compile_verdicts.load(path), fast).error_code == "E1001 CompileTimeScopedVmemOom"

    other = tmp_path / "other.json"
    compile_verdicts.record(other, fast, verdict)
    assert compile_verdicts.lookup(compile_verdicts.load(other), full) is None
    assert compile_verdicts.lookup(compile_verdicts.load(other), fast) is not None

    timed_out = tmp_path / "timed-out.json"
    compile_verdicts.record(timed_out, full, dataclasses.replace(verdict, undecided_after_s=3600.0))
    assert compile_verdicts.lookup(compile_verdicts.load(timed_out), fast) is None
    assert compile_verdicts.lookup(compile_verdicts.load(timed_out), full).undecided


def test_the_eval_step_has_a_key_of_its_own_and_a_train_verdict_never_stands_for_it(dev_target, tmp_path):
    """The eval step MaxText compiles at start (aot/eval_compile.py) runs on the same argv as the train step but is
    another program (no gradient, the state not donated): the step is part of the key, a train verdict is never
    found for an eval look-up nor the reverse (in either mode), and a train key is the key as it was before eval
    steps were compiled (kept verdicts keep their digests)."""
    config, target = dev_target
    train = runner.compile_key(target, compile_verdicts.MODE_MEMORY_KERNELS)
    evaluated = runner.compile_key(dataclasses.replace(target, step=compile_verdicts.STEP_EVAL),
                                   compile_verdicts.MODE_MEMORY_KERNELS)
    assert train.argv == evaluated.argv and train.digest() != evaluated.digest()
    assert "step" not in train.as_dict() and evaluated.as_dict()["step"] == compile_verdicts.STEP_EVAL
    # The program's compiler: the eval step's key at the run's eval batch is the train argv's, another step.
    compiler = ProgramCompiler()
    at_eval = compiler.key(config, 1, eval_batch=config.workload.plan.per_device_batch_size)
    assert at_eval.step == compile_verdicts.STEP_EVAL and at_eval.argv == compiler.key(config, 1).argv
    fits = compile_verdicts.Verdict(compiled=True, shape="s", slices=1, libtpu="0.0.50.1", maxtext="0.2.5")
    for kept, other in ((train, evaluated), (evaluated, train),
                        (dataclasses.replace(train, mode=compile_verdicts.MODE_FULL), evaluated)):
        path = tmp_path / f"{kept.digest()}.json"
        compile_verdicts.record(path, kept, fits)
        assert compile_verdicts.lookup(compile_verdicts.load(path), other) is None
        assert compile_verdicts.lookup(compile_verdicts.load(path), kept) is not None
