"""Every warning and note `pulumi up` can print from the program fits 100 columns as the program hands it to
Pulumi (infra/up_messages.for_pulumi, __main__.py), with realistic long values, and a command in it still joins
back to the command: the deployer not known (120 columns once), a version the location no longer offers, a kept
bucket adopted, what Cloud Storage could not list or read, a bucket owner's grant, the planner's notes (the
near-limit ones ran 172-376 columns) and the changes of the run's shape."""
from __future__ import annotations

import logging

import pytest

from core.cli_errors import CONTINUATION, MAX_COLUMNS, join_command
from infra import bucket_access, data_lookups, naming, preflight
from infra.config import build
from infra.up_messages import for_pulumi
from preview import harness
from preview.harness import run_program
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO

# A 30-character project ID (the longest GCP allows) and a 403 as the provider words it.
PROJECT = "a-thirty-character-project-id1"
DENIED = ("invoke of gcp:organizations/getClientOpenIdUserInfo:getClientOpenIdUserInfo failed: googleapi: Error "
          "403: deployer@a-thirty-character-project-id1.iam.gserviceaccount.com does not have storage.objects.list "
          "access to the Google Cloud Storage bucket. Permission 'storage.objects.list' denied on resource (or it "
          "may not exist)., forbidden (email)")
DATA = "gs://a-shared-corpus-bucket-with-a-long-name/c4/en/train-*-of-01024.array_record"
WEIGHTS = "gs://my-weights-bucket-with-a-long-name/llama3-8b/0/items"


def _commands(lines: list[str]) -> list[str]:
    """The commands the lines quote, each joined from its ` \\` continuations."""
    found, index = [], 0
    while index < len(lines):
        if lines[index].lstrip().startswith(("gcloud ", "python -m ")):
            end = index
            while lines[end].endswith(CONTINUATION) and end + 1 < len(lines):
                end += 1
            found.append(join_command(lines[index:end + 1]))
            index = end
        index += 1
    return found


def _fits(text: str) -> None:
    lines = for_pulumi(text).splitlines()
    wide = [line for line in lines if len(line) > MAX_COLUMNS]
    assert not wide, wide
    # Every command it quotes joins back to the command as written.
    assert _commands(lines) == _commands(text.splitlines())


def _raise(message: str):
    def call(*_args):
        raise Exception(message)
    return call


def _raw() -> dict:
    raw = {**load_stack_config("prod", REPO), "project": PROJECT,
           "clusterName": "a-forty-character-cluster-name-for-tests", "datasetType": "grain", "datasetPath": DATA,
           "evalDatasetPath": DATA.replace("train", "validation"), "evalSteps": "2",
           "loadParametersPath": WEIGHTS, "runName": "c4-en-llama3-8b-from-published-weights-1"}
    return raw


def test_the_deployer_not_known():
    # The node account's ID as the stack names it (at most 30 characters: naming.Names).
    account = naming.Names("a-forty-character-cluster-name-for-tests").node_service_account
    _, warning = preflight.deployer_member(PROJECT, account, _raise(DENIED))
    # preflight lays this warning out itself (the deployer's fix as a command joined with backslashes); what
    # pulumi up prints of it must still fit and join back.
    _fits(warning)


def test_what_cloud_storage_could_not_list_or_read():
    config = build(_raw())
    lookups = data_lookups.Lookups(list_objects=_raise(DENIED), read_object=_raise(DENIED))
    facts = data_lookups.look_up(config, lookups)
    assert len(facts.warnings) >= 3
    for warning in facts.warnings:
        _fits(warning)


def test_a_finished_run():
    config = build(_raw())
    steps = [f"maxtext/{config.workload.run.run_name}/checkpoints/{step}/_CHECKPOINT_METADATA"
             for step in (1000, config.workload.train_steps)]
    listing = {"list_objects": lambda bucket, pattern, token: (steps if "checkpoints" in pattern else
                                                               [pattern.replace("*", "00001")], None),
               "read_object": _raise("Error 403: denied, forbidden")}
    facts = data_lookups.look_up(config, data_lookups.Lookups(**listing))
    [finished] = [w for w in facts.warnings if "has finished" in w]
    _fits(finished)


def test_a_bucket_owner_s_grant():
    config = build(_raw())
    access = bucket_access.decide(config, "123456789012", _raise(DENIED))
    assert access.owner_grants
    _fits("\n".join(access.owner_grants))


@pytest.mark.parametrize("stack, extra", [
    ("dev", {"perDeviceBatchSize": "12", "compileCheck": "off"}),
    ("dev", {"perDeviceBatchSize": "40", "memoryCheck": "false", "compileCheck": "off"}),
    ("prod", {"maxtextSettings": {"ici_sequence_parallelism": "2"}, "compileCheck": "off"}),
    ("prod", {"datasetType": "grain", "datasetPath": DATA, "evalDatasetPath": DATA, "evalSteps": "2",
             "compileCheck": "off"}),
])
def test_the_planner_s_notes_and_the_shape_changes(stack, extra):
    config = build({**load_stack_config(stack, REPO), **extra})
    assert config.workload.plan.notes
    for note in config.workload.plan.notes:
        _fits(f"plan: {note}")
    for change in config.shape_changes:
        _fits(change.message)


def test_a_size_by_default():
    [change] = build({**MINIMAL, "clusterName": "a-forty-character-cluster-name-for-tests"}).shape_changes
    _fits(change.message)


def test_a_retired_version_and_an_adopted_bucket_as_pulumi_up_logs_them(monkeypatch, caplog):
    monkeypatch.setitem(harness.EXISTING, "clusters", {"a-forty-character-cluster-name-for-tests"})
    with caplog.at_level(logging.WARNING):
        run_program({**MINIMAL, "clusterName": "a-forty-character-cluster-name-for-tests",
                     "gkeVersion": "1.33.1-gke.1107000"}, stack="pin")
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("already exists" in w for w in warnings)
    for warning in warnings:
        assert all(len(line) <= MAX_COLUMNS for line in warning.splitlines()), warning
