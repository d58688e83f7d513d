"""The offline plan ends with one Verdict block (preview/verdict.py): errors, what was not checked with the command
that checks it, what was compiled or read from kept verdicts, and what the exit code means. A machine without
GitHub has no pinned CRDs: the plan still ends by saying so, and which command fixes it."""
from __future__ import annotations

from preview import cli
from preview.k8s import crd_fetch
from preview.verdict import compiled_lines
from tests.conftest import REPO


def _verdict(text: str) -> list[str]:
    block = text.rstrip().split("\n\n")[-1].splitlines()
    assert block[0] == "Verdict", text[-800:]
    # Wrapped lines joined back (continuations are indented deeper than an entry).
    entries: list[str] = []
    for line in block[1:]:
        if line.startswith("   ") and entries and not line.strip().startswith("python -m "):
            entries[-1] += " " + line.strip()
        else:
            entries.append(line.strip())
    return entries


def test_without_the_crds_the_plan_ends_saying_what_was_not_checked_and_the_command_that_fixes_it(
        capsys, monkeypatch):
    monkeypatch.setattr(crd_fetch, "find_schemas", lambda *args: crd_fetch.SchemaLookup(None))
    code = cli.main(["--stack", "dev", "--root", str(REPO), "--set", "compileCheck=off"])
    entries = _verdict(capsys.readouterr().out)
    assert code == 1
    assert entries[0] == "errors: 0"
    [crds] = [entry for entry in entries if entry.startswith("not checked: custom resources")]
    assert crd_fetch.ENV_OVERRIDE in crds and crds.endswith("to check it, run")
    # The command that fixes it alone on the next line, to copy.
    assert entries[entries.index(crds) + 1] == "python -m preview.k8s.crd_fetch"
    assert "python -m preview --stack dev --compile" in entries
    assert entries[-1] == "exit 1: custom resources could not be checked against their CRDs (nothing else failed)"


def test_with_the_crds_the_verdict_is_exit_0_and_names_only_what_stays_unchecked(capsys):
    code = cli.main(["--stack", "prod", "--root", str(REPO)])
    entries = _verdict(capsys.readouterr().out)
    assert code == 0
    assert not any("CRDs" in entry for entry in entries)
    assert entries[-1].startswith("exit 0: the plan is valid")


def test_opting_out_of_the_crd_check_is_named_in_the_verdict(capsys):
    assert cli.main(["--stack", "jobset", "--root", str(REPO), "--no-crd-check"]) == 0
    entries = _verdict(capsys.readouterr().out)
    assert "not checked: custom resources against their CRDs (--no-crd-check)" in entries


def test_the_verdict_names_each_compiled_shape_and_whether_it_was_read_from_a_kept_verdict():
    compiled = {"shapes": [
        {"num_slices": 1, "topology": "v6e-8", "cached": True, "compiled": True, "seconds": 0.0},
        {"num_slices": 2, "topology": "v6e-8", "cached": False, "compiled": False, "seconds": 151.0}]}
    assert compiled_lines(compiled, "dev") == [
        "compile: 1 x v6e-8: fits (read from kept verdicts)",
        "compile: 2 x v6e-8: refused or not compiled (compiled in 151 s)"]
    assert compiled_lines(None, "dev") == []


def test_json_carries_the_verdict_and_the_shape_changes(capsys):
    import json
    assert cli.main(["--stack", "dev", "--root", str(REPO), "--json=summary", "--set", "perDeviceBatchSize=12",
                     "--set", "compileCheck=off"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["verdict"]["exit_code"] == 0
    assert document["verdict"]["lines"][-1].startswith("exit 0: ")
    [change] = document["shape_changes"]
    assert change["kind"] == "elastic turned fixed" and change["key"] == "perDeviceBatchSize"
    assert "\n" not in change["message"]              # whole: the terminal wraps it, JSON does not
