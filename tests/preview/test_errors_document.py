"""`python -m preview --json` refuses with one schema (preview/errors_document.ERRORS_SCHEMA, documented in
docs/offline-plan.md): every catalogued refusal validates against it, `allowed` is a list of strings or null,
and `message` carries no terminal line wrapping. Independent checks report together in one run."""
from __future__ import annotations

import json

import jsonschema
import pytest

from infra.config import ConfigError, build
from preview import cli
from preview.errors_document import ERRORS_SCHEMA, error_rows, errors_document, unwrap
from tests.test_refusal_columns import CASES

VALIDATOR = jsonschema.Draft202012Validator(ERRORS_SCHEMA)


def _document(raw: dict) -> dict:
    with pytest.raises(ConfigError) as error:
        build(raw)
    return errors_document(error_rows(error.value, raw))


@pytest.mark.parametrize("raw", [case[1] for case in CASES], ids=[case[0] for case in CASES])
def test_every_catalogued_refusal_has_the_one_schema_and_no_wrapping(raw):
    document = _document(raw)
    VALIDATOR.validate(json.loads(json.dumps(document, default=str)))
    with pytest.raises(ConfigError) as error:
        build(raw)
    for row, problem in zip(document["errors"], error.value.problems):
        # The same words as the terminal's refusal, none lost, none added ...
        assert row["message"].split() == str(problem).split()
        # ... and no line of it is the wrapped tail of another: each starts a sentence or is a command.
        assert not any(line != line.lstrip() for line in row["message"].splitlines())


def test_a_refusal_over_hbm_keeps_its_parts_whole():
    raw = next(case[1] for case in CASES if case[0] == "hbm: dev model=llama3-70b")
    [row] = [row for row in _document(dict(raw))["errors"] if row["key"] == "model"]
    lines = row["message"].splitlines()
    assert lines[1].startswith("nearest that fits: ") and lines[2].startswith("why: ")
    assert len(lines[2]) > 100                          # the planner's why, one line (the terminal wraps it)
    command = next(line for line in lines if line.startswith("python -m preview.compile "))
    assert command.endswith("--no-memory-check")
    assert row["allowed"] and all(option.startswith("tpu-multislice:") for option in row["allowed"])


def test_unwrap_joins_wrapped_sentences_and_command_continuations_only():
    wrapped = ("tpu-multislice:x=1 is refused because " + "word " * 12 + "and more words to\n"
               "    fill the line\n"
               "    nearest that fits: y\n"
               "    python -m preview.compile --a 1 \\\n"
               "        --b 2")
    assert unwrap(wrapped).splitlines() == [
        "tpu-multislice:x=1 is refused because " + "word " * 12 + "and more words to fill the line",
        "nearest that fits: y", "python -m preview.compile --a 1 --b 2"]


@pytest.mark.parametrize("argv, env, keys", [
    (["--set", "slices"], {}, ["--set"]),
    (["--set", "capacity=cheap", "--set", "nope[3]=1"], {}, ["--set", "capacity"]),
    (["--set", "capacity=cheap"], {"TPU_MULTISLICE_CRDS": "/nonexistent-crds"}, ["capacity", "TPU_MULTISLICE_CRDS"]),
])
def test_command_line_refusals_share_the_schema_and_independent_checks_report_together(argv, env, keys, capsys,
                                                                                        monkeypatch):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert cli.main(["--stack", "dev", "--json", *argv]) == 2
    document = json.loads(capsys.readouterr().out)
    VALIDATOR.validate(document)
    assert [row["key"] for row in document["errors"]] == keys


def test_no_such_stack_is_one_row_too(capsys):
    assert cli.main(["--stack", "nope", "--json"]) == 2
    document = json.loads(capsys.readouterr().out)
    VALIDATOR.validate(document)
    assert document["errors"][0]["key"] == "--stack"
