"""The pre-flight compile loads the workers' libtpu (aot/workers_libtpu.py): the version and hashes of
worker_env/requirements.lock, from the override or the user's cache only when its wheel's digest is one of the
lock's; otherwise the local libtpu, said in one line, and the verdict is keyed under that version."""
from __future__ import annotations

import hashlib

import pytest

from aot import runner, workers_libtpu
from core.worker_lock import load_pins
from tests.conftest import REPO


def _unpacked(where, version):
    """A libtpu laid out as its wheel unpacks: libtpu/libtpu.so beside libtpu-<version>.dist-info."""
    (where / "libtpu").mkdir(parents=True)
    (where / f"libtpu-{version}.dist-info").mkdir()
    so = where / "libtpu" / "libtpu.so"
    so.write_bytes(b"not really a libtpu")
    return so


def test_the_pin_is_the_workers_lock():
    pin = workers_libtpu.lock_pin(REPO)
    assert pin.version == load_pins(REPO)["libtpu"]
    assert len(pin.hashes) >= 1 and all(len(digest) == 64 for digest in pin.hashes)


def test_a_cached_copy_is_used_only_with_a_digest_from_the_lock(tmp_path, monkeypatch):
    monkeypatch.delenv(workers_libtpu.ENV_OVERRIDE, raising=False)
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    pin = workers_libtpu.lock_pin(REPO)
    missing = workers_libtpu.find(REPO)
    assert missing.so is None and "is not fetched (python -m aot.workers_libtpu --fetch)" in missing.note
    cached = workers_libtpu.cache_dir(pin.version)
    assert cached == tmp_path / "tpu-multislice" / "libtpu" / pin.version
    so = _unpacked(cached, pin.version)
    (cached / workers_libtpu.MARKER).write_text(hashlib.sha256(b"another wheel").hexdigest())
    assert workers_libtpu.find(REPO).so is None                 # a digest the lock does not have
    (cached / workers_libtpu.MARKER).write_text(sorted(pin.hashes)[0] + "\n")
    found = workers_libtpu.find(REPO)
    assert found == workers_libtpu.Found(so, pin.version)
    # The compile's key and environment follow it.
    assert runner.loaded_libtpu() == pin.version and runner.compile_libtpu().so == so


def test_the_override_must_be_the_pinned_version(tmp_path, monkeypatch):
    pin = workers_libtpu.lock_pin(REPO)
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    old = _unpacked(tmp_path / "old", "0.0.42.1")
    monkeypatch.setenv(workers_libtpu.ENV_OVERRIDE, str(old))
    refused = workers_libtpu.find(REPO)
    assert refused.so is None and f"is libtpu 0.0.42.1, not {pin.version}" in refused.note
    assert len(refused.note) <= 100 - len("memory: "), refused.note
    good = _unpacked(tmp_path / "good", pin.version)
    monkeypatch.setenv(workers_libtpu.ENV_OVERRIDE, str(good))
    assert workers_libtpu.find(REPO) == workers_libtpu.Found(good, pin.version)
    monkeypatch.setenv(workers_libtpu.ENV_OVERRIDE, "local")
    assert workers_libtpu.find(REPO).so is None


def test_the_compile_gets_the_workers_libtpu_through_tpu_library_path(tmp_path, monkeypatch):
    """run_compile hands the found .so to train_compile as TPU_LIBRARY_PATH (the stand-in records its env)."""
    import json
    import sys

    from infra.config import build
    from preview.stack_files import load_stack_config
    from workloads.compile_check import ProgramCompiler

    pin = workers_libtpu.lock_pin(REPO)
    good = _unpacked(tmp_path / "good", pin.version)
    monkeypatch.setenv(workers_libtpu.ENV_OVERRIDE, str(good))
    monkeypatch.delenv("TPU_LIBRARY_PATH", raising=False)
    monkeypatch.setenv("FAKE_COMPILE", "fits")
    monkeypatch.setenv("FAKE_COMPILE_RECORD", str(tmp_path / "record.json"))
    config = build({**load_stack_config("dev", REPO), "perDeviceBatchSize": "4"})
    target = ProgramCompiler().target(config, 1)
    result = runner.run_compile(target, compiler=(sys.executable, str(REPO / "tests/preview/fake_train_compile.py")))
    seen = json.loads((tmp_path / "record.json").read_text())["env"]
    assert seen["TPU_LIBRARY_PATH"] == str(good) and result.libtpu == pin.version
    assert result.key.libtpu == pin.version and f"TPU_LIBRARY_PATH={good}" in result.command
