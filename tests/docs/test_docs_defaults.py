"""What the docs state as a default or a rule is read back from the code, so a doc that drifts fails: the checkpoint period of a stack, of the entrypoint and of the local run; which data an elastic run reads;
what the pre-flight compile's --help says it takes; the README's test time and deploy steps against the pages
that measured or detail them."""
from __future__ import annotations

import contextlib
import io
import math
import re

import pytest

from core import data
from core.maxtext_args import CHECKPOINT_PERIOD_RULE, default_checkpoint_period
from infra.config import ConfigError, build
from preview.cli import parse_args
from tests.conftest import MINIMAL, REPO
from trainer.local.run import LOCAL_DEFAULTS
from trainer.local.run import build_parser as local_parser

# How the docs write each grain format MaxText names (core/data.py DATASET_FORMATS).
FORMAT_NAMES = {"arrayrecord": "ArrayRecord", "parquet": "Parquet"}


def _doc(name: str) -> str:
    return " ".join((REPO / name).read_text(encoding="utf-8").split())      # lines joined: sentences wrap


def _one(pattern: str, text: str, where: str) -> re.Match:
    found = re.search(pattern, text)
    assert found, f"{where} no longer states: {pattern}"
    return found


def test_the_stacks_checkpoint_period_default_is_what_the_docs_say():
    stated = {int(_one(r"`checkpointPeriod` \|[^|]*\|[^|]*\|[^|]*\|[^|]*Unset: (\d+), or trainSteps when the run "
                       r"is shorter", _doc("docs/configuration.md"), "docs/configuration.md").group(1)),
              int(_one(r"a stack's `checkpointPeriod` is (\d+), or trainSteps when the run is shorter",
                       _doc("docs/trainer.md"), "docs/trainer.md").group(1))}
    [period] = stated
    assert build({**MINIMAL, "trainSteps": 10 * period}).workload.checkpoint_period == period
    assert build({**MINIMAL, "trainSteps": period - 1}).workload.checkpoint_period == period - 1


def test_the_entrypoints_and_the_local_runs_checkpoint_period_is_what_the_docs_say():
    trainer_md = _doc("docs/trainer.md")
    assert f"`python -m trainer.entrypoint` without `--checkpoint-period` takes {CHECKPOINT_PERIOD_RULE}" in trainer_md
    divisor, low, high = map(int, _one(r"steps/(\d+), at least (\d+), at most (\d+)", CHECKPOINT_PERIOD_RULE,
                                       "CHECKPOINT_PERIOD_RULE").groups())
    for steps in range(1, 3000):
        assert default_checkpoint_period(steps) == max(low, min(high, steps // divisor)), steps
    local = LOCAL_DEFAULTS["checkpoint_period"]
    assert int(_one(r"`python -m trainer.local` saves every (\d+) steps", trainer_md, "docs/trainer.md").group(1)) \
        == local
    assert int(_one(r"30 steps, a checkpoint every (\d+)\.", trainer_md, "docs/trainer.md").group(1)) == local
    # trainer.local's --help states its own default, not the entrypoint's rule (they disagreed).
    help_text = " ".join(local_parser().format_help().split())
    assert f"steps between checkpoints (default: {local})" in help_text


def test_the_elastic_data_rules_are_what_configuration_md_says():
    page = _doc("docs/configuration.md")
    accepted = _one(r"Elastic runs \([^)]*\) read (\w+) data only", page, "docs/configuration.md").group(1)
    refused = _one(r"So (\w+) is refused on an elastic run", page, "docs/configuration.md").group(1)
    assert {accepted} == {FORMAT_NAMES[f] for f in data.ELASTIC_FORMATS}
    assert {refused} == {FORMAT_NAMES[f] for f in data.DATASET_FORMATS} - {accepted}
    # And the stack does what the page says: the dev stack's shape (elastic on Spot).
    elastic = {**MINIMAL, "capacity": "spot", "model": "qwen3-0.6b", "datasetType": "grain"}
    assert build({**elastic, "datasetPath": "gs://my-data/train-*.array_record"}).workload.plan.elastic
    with pytest.raises(ConfigError) as refusal:
        build({**elastic, "datasetPath": "gs://my-data/part-*.parquet"})
    assert "is parquet data, refused on an elastic run" in refusal.value.problems[0]
    # An elastic Pathways run: grain data in either format is refused, as the page says.
    assert "An elastic Pathways run (`pathwaysElasticSlices` above 0) is refused grain data in either format" in page
    for path in ("gs://my-data/train-*.array_record", "gs://my-data/part-*.parquet"):
        with pytest.raises(ConfigError):
            build({**MINIMAL, "workloadBackend": "pathways", "model": "qwen3-0.6b", "pathwaysElasticSlices": 1,
                   "datasetType": "grain", "datasetPath": path})


def test_the_compile_times_in_preview_help_are_the_measured_ones():
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        parse_args(["--help"])
    help_text = " ".join(out.getvalue().split())
    assert "1.5-10 min" not in help_text
    planner = _doc("docs/planner.md")
    # The program's verdict (the kernels alone + memory-only): the times the benchmark's table measured.
    stated = _one(r"the 8B prod step (\d+m\d+s), a 70B step (\d+m\d+s)", help_text, "--compile's help")
    for case, time in zip(("8b-prod", "70b-v6e-64-b4"), stated.groups()):
        assert re.search(rf"\| {case}\b[^|]*\| memory-only\+kernels \|(?:[^|]*\|){{3}} {time} \|", planner), (
            case, time)


def test_the_readme_states_the_test_time_development_md_measured():
    """The README's figure for its test command is the range of the runs docs/development.md measured (whole
    `.ci/run`, minutes), and the slowest run with other work beside it."""
    table = (REPO / "docs/development.md").read_text(encoding="utf-8")
    runs = re.findall(r"^\| \d+ \| (.+?) \| .+? \| (\d+) min (\d+) s \|$", table, re.M)
    assert len(runs) >= 3, runs
    minutes = [(beside, int(m) + int(sec) / 60) for beside, m, sec in runs]
    loaded = [value for beside, value in minutes if beside != "nothing"]
    every = [value for _, value in minutes]
    stated = f"the whole command took {math.floor(min(every))}-{math.ceil(max(every))} minutes on 2 cores"
    if loaded:
        stated += f", {round(max(loaded))} with busy processes beside it"
    assert stated in _doc("README.md"), stated


def test_the_readme_deploy_block_has_the_steps_deploying_md_has():
    readme, deploying = (REPO / "README.md").read_text(), (REPO / "docs/deploying.md").read_text()
    assert "PULUMI_CONFIG_PASSPHRASE" in deploying
    assert "export PULUMI_CONFIG_PASSPHRASE=" in readme
    assert ("python -m preview.deployer_roles --grants --stack dev --project MY_PROJECT --member user:YOU@EXAMPLE.COM"
            in deploying)
    assert "python -m preview.deployer_roles --admin-script --stack dev \\\n     --project MY_PROJECT" in deploying
    assert ".venv/bin/python -m preview.deployer_roles --admin-script --stack dev --project MY_PROJECT" in readme
    # The quota listing needs the Cloud Quotas API, enabled before it in both.
    for doc in (readme, deploying):
        assert doc.index("cloudquotas.googleapis.com") < doc.index("gcloud beta quotas info list")
    quota = re.search(r"gcloud beta quotas info list .*?--format='yaml\(quotaId,dimensionsInfos\)'", deploying,
                      re.DOTALL)
    assert quota and quota.group(0) in readme
