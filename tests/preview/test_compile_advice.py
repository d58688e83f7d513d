"""When XLA runs out of HBM on a step the planner accepted, the offline plan names the run to compile next: the
largest smaller per-device batch the planner lays out (core/advice.py next_smaller_batch), as the config key."""
from __future__ import annotations

import json

import pytest

from infra.config import build
from preview import cli
from preview import compile as pf
from preview.stack_files import load_stack_config
from tests.conftest import REPO

G = 1 << 30


def _canned(compiled: bool) -> pf.CompileResult:
    return pf.CompileResult(
        compiled=compiled, peak_bytes_per_device=int(22.4 * G) if compiled else None, hbm_bytes=int(31.25 * G),
        topology="v6e-16", num_slices=2, seconds=60.0,
        reason=None if compiled else "RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
                                     "HLO temporaries (33.02G) exceeds available HBM (31.25G).",
        required_bytes=None if compiled else int(33.02 * G), source="test", libtpu="0.0.42.1")


@pytest.mark.parametrize("compiled", [True, False])
def test_out_of_hbm_names_the_batch_to_compile_next(monkeypatch, capsys, compiled, tmp_path):
    planned = build(load_stack_config("prod", REPO)).workload.plan.per_device_batch_size
    monkeypatch.setattr(pf, "run_verdict", lambda target, **kwargs: _canned(compiled))
    code = cli.main(["--stack", "prod", "--compile", "--json", "--root", str(REPO)])
    document = json.loads(capsys.readouterr().out)
    if compiled:
        assert code == cli.EXIT_OK and "nearest_to_try" not in document["compile"]
        return
    assert code == cli.EXIT_COMPILE
    batch = document["compile"]["nearest_to_try"]["perDeviceBatchSize"]
    assert batch < planned
    build({**load_stack_config("prod", REPO), "perDeviceBatchSize": f"{batch:g}"})   # the suggestion builds
    # XLA's refusal is kept (compile-verdicts.json) and now refuses the stack at config build: compile the same
    # step again with a fresh verdicts file to see the text report.
    from core.compile_verdicts import PATH_ENV
    monkeypatch.setenv(PATH_ENV, str(tmp_path / "again.json"))
    cli.main(["--stack", "prod", "--compile", "--root", str(REPO)])
    assert f"nearest to try: tpu-multislice:perDeviceBatchSize={batch:g}" in capsys.readouterr().out
