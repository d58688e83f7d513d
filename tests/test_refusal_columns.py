"""Every refusal, as the user reads it, fits a 100-column terminal.

Each catalogued bad config (tests/infra/test_config_catalogue.py, tests/infra/test_data_config.py) is rendered the
two ways a user meets it: as `python -m preview` prints it (core/cli_errors.refuse) and as `pulumi up` prints the
program's error (str(ConfigError), __main__.py). The refusals over HBM quote a compile command: wrapped, it ends
its lines with ` \\` and, joined again, is exactly the command the planner wrote. The trainers' refusals
(`python -m trainer.local`, `python -m trainer.entrypoint`) are rendered by their own main().
"""
from __future__ import annotations

import io
import re
from contextlib import redirect_stderr

import pytest

from core.cli_errors import CONTINUATION, MAX_COLUMNS, fit_columns, join_command, refuse
from infra.config import NAMESPACE, ConfigError, build
from preview import cli as preview_cli
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from tests.infra import test_config_catalogue as catalogue
from tests.infra import test_data_config as data_catalogue

CASES = ([(case_id, {**base, **overrides}, named) for case_id, base, overrides, named, _ in catalogue.REFUSED]
         + [(f"data: {case_id}", raw, named) for case_id, raw, named, _ in data_catalogue.REFUSED]
         + [(f"hbm: {stack} {key}={value}", {**load_stack_config(stack, REPO), key: value}, f"{key}=")
            for stack, key, value in (("dev", "model", "llama3-70b"), ("dev", "perDeviceBatchSize", "40"),
                                      ("prod", "perDeviceBatchSize", "16"))])

COMMAND = re.compile(r"^\s*(python -m preview\.compile .*)$", re.MULTILINE)


def _problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as error:
        build(raw)
    return error.value.problems


def _check_lines(text: str, where: str) -> None:
    wide = [line for line in text.splitlines() if len(line) > MAX_COLUMNS]
    assert not wide, (where, [len(line) for line in wide], text)


def _check_commands(problem: str, rendered: str) -> None:
    """Every command the raw refusal quotes is in the rendered text, wrapped with continuations or whole."""
    lines = rendered.splitlines()
    for command in COMMAND.findall(problem):
        start = next(i for i, line in enumerate(lines) if line.strip().startswith("python -m preview.compile"))
        end = start
        while lines[end].endswith(CONTINUATION):
            end += 1
        assert join_command(lines[start:end + 1]) == command.strip(), (command, lines[start:end + 1])


def _preview_prints(problem: str) -> str:
    out = io.StringIO()
    with redirect_stderr(out):
        refuse("python -m preview", problem)
    return out.getvalue()


@pytest.mark.parametrize("raw, named", [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_every_catalogued_refusal_fits_100_columns_and_names_the_key_first(raw, named):
    problems = _problems(raw)
    key = named.split("=")[0].split("[")[0]
    for problem in problems:
        for rendered, where in ((_preview_prints(problem), "python -m preview"),
                                (str(ConfigError([problem])), "pulumi up")):
            _check_lines(rendered, where)
            _check_commands(problem, rendered)
    # The first line of the refusal of the key the user set names that key and its value.
    [mine] = [p for p in problems if f"{NAMESPACE}:{key}" in p.split("\n")[0]] or [problems[0]]
    first = _preview_prints(mine).splitlines()[0]
    assert f"{NAMESPACE}:{key}" in first, first


def test_a_refusal_over_hbm_wraps_its_compile_command_with_continuations():
    problem = _problems({**load_stack_config("dev", REPO), "model": "llama3-70b"})[0]
    [command] = COMMAND.findall(problem)
    assert len(command.strip()) > MAX_COLUMNS        # a refusal once met: 178 columns on one line
    rendered = _preview_prints(problem)
    assert any(line.endswith(CONTINUATION) for line in rendered.splitlines())
    _check_commands(problem, rendered)


def test_preview_cli_prints_the_dev_70b_refusal_within_100_columns(capsys):
    assert preview_cli.main(["--stack", "dev", "--set", "model=llama3-70b"]) == 2
    err = capsys.readouterr().err
    _check_lines(err, "python -m preview --stack dev --set model=llama3-70b")
    assert err.splitlines()[0].startswith("python -m preview: tpu-multislice:model='llama3-70b'")


@pytest.mark.parametrize("module", ["trainer.local", "trainer.entrypoint"])
def test_the_trainers_refusal_over_hbm_fits_100_columns(module, capsys):
    import importlib
    main = importlib.import_module(module if module == "trainer.entrypoint" else "trainer.local.run").main
    argv = ["--model", "llama3-70b", "--steps", "3"]
    if module == "trainer.entrypoint":       # 70B on one v6e-8: refused by the planner before Ray is asked for
        argv += ["--topology", "2x4", "--slices", "1", "--base-output-directory", "gs://bucket/out"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    _check_lines(err, module)
    lines = err.splitlines()
    assert lines[0].startswith(f"{module.split('.')[0] if module == 'trainer.entrypoint' else module}: nearest")
    start = next(i for i, line in enumerate(lines) if line.strip().startswith("python -m preview.compile"))
    assert lines[start].endswith(CONTINUATION)
    joined = join_command(lines[start:start + 2])
    assert joined.startswith("python -m preview.compile --model llama3-70b") and joined.endswith("--no-memory-check")


def test_fit_columns_keeps_short_lines_and_joins_back_what_it_wraps():
    assert fit_columns("short\n    indented") == "short\n    indented"
    command = "python -m preview.compile " + " ".join(f"--flag-{i} {i}" for i in range(20))
    first, *lines = fit_columns("prog: refused; run\n  " + command).splitlines()
    assert first == "prog: refused; run"          # the first line is prose, never a command to wrap
    assert len(lines) > 1 and all(len(line) <= MAX_COLUMNS for line in lines)
    assert join_command(lines) == command
    # A flag stays beside its value.
    assert not any(line.rstrip(CONTINUATION).rstrip().endswith(tuple(f"--flag-{i}" for i in range(20)))
                   for line in lines)
