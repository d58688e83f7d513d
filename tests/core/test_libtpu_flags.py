"""libtpu accepts every LIBTPU_INIT_ARGS we send (core/tpu_env.py, from core/recipes.py) and compiles with them.

Two libtpu versions matter:
- the pre-flight one, libtpu 0.0.42.1 (the JAX 0.10.2 of this project's venv; requirements-trainer.txt pins it):
  checked live whenever this interpreter has it installed;
- the cluster's, worker_env/requirements.lock's (0.0.50.1, what jax[tpu] 0.12.0.1 pins). It publishes cp311
  wheels too, but jax 0.10.2 here pins 0.0.42.1 and one environment holds one libtpu, so it is not installed
  here: its result is the committed LIBTPU_CHECKS table (scripts/libtpu_flag_check.py --write), which must cover exactly what we send now. Set
  CLUSTER_LIBTPU_SO=/path/to/site-packages/libtpu/libtpu.so (of that version) to re-check it live: jax 0.10.2
  loads a newer libtpu.so through TPU_LIBRARY_PATH.
libtpu 0.0.42.1 alone would not have caught the continuation-fusion failure: it accepts the pair that 0.0.50.1 and
0.0.52 refuse.
"""
import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest

from core.recipes import LIBTPU_CHECKS, RECIPES, LibtpuCheck
from core.worker_lock import load_pins

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("libtpu_flag_check", ROOT / "scripts" / "libtpu_flag_check.py")
check = sys.modules.setdefault("libtpu_flag_check", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(check)

CLUSTER_LIBTPU = load_pins(ROOT)["libtpu"]
MADE_UP_FLAG = "--xla_tpu_this_flag_does_not_exist_anywhere=true"


def preflight_libtpu() -> str:
    """The libtpu requirements-trainer.txt pins (0.0.42.1, the libtpu of its jax 0.10.2, when not pinned yet)."""
    for line in (ROOT / "requirements-trainer.txt").read_text().splitlines():
        match = re.match(r"libtpu==(\S+)", line)
        if match:
            return match.group(1)
    return "0.0.42.1"


def installed_libtpu() -> str | None:
    if importlib.util.find_spec("libtpu") is None:
        return None
    return importlib.metadata.version("libtpu")


def _rows(version: str) -> dict[tuple[str, int, str], LibtpuCheck]:
    return {(r.topology, r.slices, r.flags_sha256): r for r in LIBTPU_CHECKS if r.libtpu == version}


# ---- the committed table (always runs) ------------------------------------------------------------------------
def test_the_cluster_libtpu_table_covers_exactly_what_we_send():
    """Changing a flag (or the lock's libtpu) without re-running the check against the cluster's libtpu fails
    here. This is the test that catches the continuation-fusion pair: with it, the 2-slice rows say
    FAILED_PRECONDITION, not OK."""
    rows = _rows(CLUSTER_LIBTPU)
    assert rows, f"no LIBTPU_CHECKS rows for the workers' libtpu {CLUSTER_LIBTPU}: run scripts/libtpu_flag_check.py"
    for case in check.emitted_cases():
        key = (check.PROBE_TOPOLOGY[case.generation], case.slices, LibtpuCheck.digest(case.flags))
        assert key in rows, f"{case.what} on {case.generation} x{case.slices}: not checked against libtpu " \
                            f"{CLUSTER_LIBTPU} (run scripts/libtpu_flag_check.py --libtpu-so ... --write)"
        assert rows[key].ok, f"libtpu {CLUSTER_LIBTPU} refuses what {case.what}: {rows[key].verdict}"


def test_every_left_out_flag_has_a_recorded_failure_on_the_cluster_libtpu():
    rows = _rows(CLUSTER_LIBTPU)
    for case in check.evidence_cases():
        if " + left out " not in case.what:
            continue
        row = rows.get((check.PROBE_TOPOLOGY[case.generation], case.slices, LibtpuCheck.digest(case.flags)))
        assert row is not None, f"{case.what}: no recorded check against libtpu {CLUSTER_LIBTPU}"
        assert not row.ok, f"{case.what}: libtpu {CLUSTER_LIBTPU} accepts it, so the reason to leave it out is gone"
    assert sum(len(r.left_out) for r in RECIPES) == len([c for c in check.evidence_cases() if "left out" in c.what])


def test_every_generation_has_a_probe_topology():
    from core.tpu_catalog import CATALOG
    assert set(check.PROBE_TOPOLOGY) == set(CATALOG)


def test_the_verdict_reader_sees_an_unknown_flag_and_a_refused_compile():
    assert check._verdict(1, "junk\nERROR: Unknown command line flag 'x'\n") == \
        ("", "ERROR: Unknown command line flag 'x'")
    refused = "jax.errors.JaxRuntimeError: FAILED_PRECONDITION: Continuation fusion for AllGather is enabled"
    assert check._verdict(1, refused)[1].startswith("FAILED_PRECONDITION: Continuation fusion")
    assert check._verdict(0, check._MARK + '{"ok": true, "libtpu": "9.9", "device_kind": "k"}') == ("9.9", "OK")
    assert check._verdict(1, check._MARK + '{"ok": true, "libtpu": "9.9", "device_kind": "k"}')[1] != "OK"


# ---- live checks --------------------------------------------------------------------------------------------
def _live(version: str, libtpu_so: str | None) -> None:
    """Every flag set we send compiles; a made-up flag does not (so a pass means libtpu really read the flags)."""
    cases = [case for case in check.emitted_cases() if case.flags]    # no flags: nothing for libtpu to refuse
    made_up = check.Case("a made-up flag", "v6e", 1, MADE_UP_FLAG, False)
    results = check.run_cases(cases + [made_up], libtpu_so=libtpu_so)
    *sent, unknown = results
    assert "Unknown command line flag" in unknown.verdict, unknown.verdict
    refused = [f"{r.case.what} on {r.case.generation} x{r.case.slices}: {r.verdict}" for r in sent if not r.ok]
    assert not refused, f"libtpu {version} refuses flags we send:\n" + "\n".join(refused)
    assert {r.libtpu for r in sent} == {version}


def test_what_we_send_compiles_on_the_preflight_libtpu():
    expected, installed = preflight_libtpu(), installed_libtpu()
    if installed is None:
        pytest.skip(f"libtpu is not installed in {sys.executable}: requirements-trainer.txt's libtpu=={expected} "
                    "(the pre-flight compile's) is needed to check flags live; the committed LIBTPU_CHECKS table "
                    "is still checked")
    assert installed == expected, f"this venv has libtpu {installed}, requirements-trainer.txt pins {expected}"
    _live(installed, None)


def test_what_we_send_compiles_on_the_cluster_libtpu():
    so = os.environ.get("CLUSTER_LIBTPU_SO")
    if not so:
        pytest.skip(f"CLUSTER_LIBTPU_SO is not set (path to libtpu.so of libtpu {CLUSTER_LIBTPU}, the workers'); "
                    "the committed LIBTPU_CHECKS table is checked instead")
    assert check.libtpu_version(libtpu_so=so) == CLUSTER_LIBTPU, f"{so} is not libtpu {CLUSTER_LIBTPU}"
    _live(CLUSTER_LIBTPU, so)
    # This libtpu is one that refuses the continuation-fusion pair: the check would have caught the old flags.
    old_multislice = check.Case("the old multislice flags", "v6e", 2, " ".join((
        "--xla_tpu_enable_data_parallel_all_reduce_opt=true", "--xla_tpu_data_parallel_opt_different_sized_ops=true",
        "--xla_tpu_enable_async_collective_fusion=true", "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
        "--xla_tpu_enable_async_collective_fusion_multiple_steps=true", "--xla_tpu_overlap_compute_collective_tc=true",
        "--xla_enable_async_all_gather=true")), False)
    assert "Continuation fusion for AllGather" in check.run_case(old_multislice, libtpu_so=so).verdict
