"""The offline plan's text fits a 100-column terminal for every committed stack; wrapping loses no word and keeps
the resource tree readable."""
from __future__ import annotations

import pytest

from preview import cli
from preview.terminal import WIDTH, fit, fit_line
from tests.conftest import ALL_STACKS, REPO


# Every committed stack (the shared cluster and its runs too), and dev at a batch near the HBM limit (the planner's near-limit notes, 172-376 columns
# once, and the warning that the elastic run turned fixed); compileCheck=off: nothing is compiled here.
PLANS = [(stack, []) for stack in ALL_STACKS] + [
    ("dev", ["--set", "perDeviceBatchSize=12", "--set", "compileCheck=off"])]


@pytest.mark.parametrize("stack, extra", PLANS, ids=[" ".join([stack, *extra]) for stack, extra in PLANS])
def test_every_committed_stacks_plan_fits_100_columns(stack, extra, capsys, caplog):
    """What the user reads: the plan on stdout and stderr, and the program's own warnings (on stderr, as
    `pulumi up` logs them: pytest takes them from the log), every line within 100 columns, the plan ending with
    its verdict."""
    code = cli.main(["--stack", stack, "--root", str(REPO), *extra])
    captured = capsys.readouterr()
    text = captured.out
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert code == 0
    assert "Critical path, deploy" in text
    assert text.rstrip().split("\n\n")[-1].startswith("Verdict\n"), text[-600:]
    for where, printed in (("stdout", text), ("stderr", captured.err), ("the program's log", logged)):
        too_wide = [line for line in printed.splitlines() if len(line) > WIDTH]
        assert not too_wide, f"{where}: {len(too_wide)} line(s) over {WIDTH} columns, e.g. {too_wide[0]!r}"
    if extra:
        assert "memory: near the limit" in text and "memory: near the limit" in logged


def test_wrapping_keeps_every_word_and_the_tree_guides():
    line = ("│  ├─ checkpoints-object-user  [gcp:storage/bucketIAMMember:BucketIAMMember]  roles/storage.objectUser "
            "→ principal://iam.googleapis.com/projects/123456789012/locations/global/workloadIdentityPools/x")
    parts = fit_line(line, 60)
    assert all(len(part) <= 60 for part in parts)
    assert parts[0].startswith("│  ├─ checkpoints-object-user")
    assert all(part.startswith("│  │     ") for part in parts[1:])
    assert "".join(part[len("│  │     "):] if i else part for i, part in enumerate(parts)).replace(" ", "") \
        == line.replace(" ", "")


def test_last_child_continues_without_a_guide_and_short_lines_are_untouched():
    parts = fit_line("   └─ " + "word " * 30, 50)
    assert all(part.startswith("         ") for part in parts[1:])
    text = "Summary\n  hosts 8, chips 32\n"
    assert fit(text) == text


def test_the_standalone_compile_report_fits_too(monkeypatch, capsys):
    from preview import compile as pf
    result = pf.CompileResult(
        compiled=False, peak_bytes_per_device=None, hbm_bytes=int(31.25 * (1 << 30)), topology="v6e-8",
        num_slices=2, seconds=104.0, reason="RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory "
        "required for HLO temporaries (86.54G) exceeds available HBM (31.25G).", required_bytes=86 << 30,
        source="ray: trainer.entrypoint --print-argv (trainer.worker)", libtpu="0.0.42.1")
    # The standalone command (preview/compile/cli.py) runs the compile through its own import.
    monkeypatch.setattr("preview.compile.cli.run_compile", lambda target, **kwargs: result)
    assert pf.main(["--model", "qwen3-0.6b", "--topology", "2x4", "--slices", "2"]) == pf.EXIT_DOES_NOT_COMPILE
    captured = capsys.readouterr()
    assert "DOES NOT FIT" in captured.out
    assert all(len(line) <= WIDTH for line in captured.out.splitlines()), captured.out
    assert all(len(line) <= WIDTH for line in captured.err.splitlines()[:-1])   # the last: the one-line error
