"""The look-up before `pulumi up` and MaxText on the cluster read the same files for every data glob the config
accepts, and the config refuses the globs they would read differently (infra/config/data_globs.py).

The two readers, played here as they are:
- Cloud Storage's matchGlob (the look-up's objects.list): preview.harness.gcs_glob, written from the table in
  https://cloud.google.com/storage/docs/json_api/v1/objects/list#list-objects-and-prefixes-using-glob;
- MaxText 0.2.5's find_data_files (input_pipeline/grain_data_processing.py): `glob.glob(pattern)` on the FUSE
  mount, played by Python's own glob.glob on a temporary tree holding the same object names.
"""
from __future__ import annotations

import glob
import os
import re
from pathlib import Path

import pytest

from infra.config import ConfigError, NAMESPACE, build
from infra.config.data_globs import glob_problem, literal_folder, maxtext_reads
from infra.config.key_checks import data_pattern
from infra.data_lookups import Lookups, look_up
from preview.harness import gcs_glob
from tests.conftest import MINIMAL

# Object names in one bucket: data files, dot-files beside them (a half-written shard, an editor's backup), a
# nested folder, a dot-folder, and names holding the characters globs treat specially.
OBJECTS = (
    "c4/train-000.array_record", "c4/train-001.array_record", "c4/.train-002.array_record",
    "c4/en/train-003.array_record", "c4/.cache/train-004.array_record", "c4/en/deep/train-005.array_record",
    "text/a.parquet", "text/b.parquet", "text/.a.parquet", "text/{a,b}.parquet", "text/a\\b.parquet",
    "text/^.parquet", "text/ab.parquet",
)

# Globs the config accepts: the look-up's answer, narrowed by maxtext_reads, is exactly what glob.glob reads.
ACCEPTED = (
    "c4/train-*.array_record", "c4/*.array_record", "c4/*/train-*.array_record", "c4/.*.array_record",
    "c4/[!.]*.array_record", "c4/[.]train-*.array_record", "c4/?rain-00[0-9].array_record", "*/*.array_record",
    "text/?.parquet", "text/[ab].parquet", "text/*.parquet", "c4/en/*/*.array_record", "*/*/*.array_record",
    "c4/train-000.array_record",
)
# Globs refused at config build: the two readers take different files from the same bucket.
REFUSED = (
    "c4/**/train-*.array_record", "c4/**.array_record", "text/{ab}.parquet", "text/a\\b.parquet",
    "text/[^a].parquet", "text/[]a].parquet", "text/[ab.parquet",
)


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """The bucket as MaxText sees it through the mount: each object a file under its folders."""
    root = tmp_path_factory.mktemp("bucket")
    for name in OBJECTS:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(name)
    return root


def _python_glob(root: Path, pattern: str) -> set[str]:
    return {os.path.relpath(path, root) for path in glob.glob(str(root / pattern)) if os.path.isfile(path)}


def _match_glob(pattern: str) -> set[str] | None:
    """What objects.list returns; None where the table gives the pattern no meaning (an empty class)."""
    try:
        regex = gcs_glob(pattern)
    except re.error:
        return None
    return {name for name in OBJECTS if regex.fullmatch(name)}


@pytest.mark.parametrize("pattern", ACCEPTED)
def test_an_accepted_glob_counts_exactly_the_files_maxtext_reads(tree, pattern):
    assert glob_problem(pattern) is None
    assert data_pattern(f"gs://my-data/{pattern}") is None
    looked_up = {name for name in _match_glob(pattern) if maxtext_reads(pattern, name)}
    assert looked_up == _python_glob(tree, pattern)


def test_the_readers_differ_on_dot_files_without_the_narrowing(tree):
    """Why maxtext_reads exists: matchGlob's '*' takes the dot-file MaxText's glob skips."""
    assert _match_glob("c4/*.array_record") - _python_glob(tree, "c4/*.array_record") == {
        "c4/.train-002.array_record"}


@pytest.mark.parametrize("pattern", REFUSED)
def test_a_glob_the_readers_take_differently_is_refused(tree, pattern):
    assert _match_glob(pattern) != _python_glob(tree, pattern), "no difference: the refusal would be needless"
    why = data_pattern(f"gs://my-data/{pattern}")
    assert why is not None and "read alike" in why, why


def test_the_refusal_is_one_line_naming_key_value_and_what_to_write():
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, "datasetType": "grain", "datasetPath": "gs://my-data/c4/**/train-*.array_record"})
    [line] = error.value.problems
    assert line.startswith(f"{NAMESPACE}:datasetPath='gs://my-data/c4/**/train-*.array_record' is not valid")
    assert "'**'" in line and "c4/*/train-*.array_record" in line and "\n" not in line


def test_the_look_up_counts_what_maxtext_reads_not_what_matchglob_lists():
    """A dot-file beside the shards (here a half-written upload) is not counted: the run would not read it."""
    bucket = {name: "" for name in OBJECTS}

    def list_objects(name, pattern, page_token):
        return [obj for obj in bucket if gcs_glob(pattern).fullmatch(obj)], None

    config = build({**MINIMAL, "datasetType": "grain", "datasetPath": "gs://my-data/c4/*.array_record"})
    facts = look_up(config, Lookups(list_objects, lambda b, n: (_ for _ in ()).throw(RuntimeError("404"))))
    assert dict(facts.data_files)["datasetPath"] == 2


def test_a_glob_that_only_dot_files_match_is_refused_as_matching_nothing():
    bucket = {"c4/.train-000.array_record": ""}
    config = build({**MINIMAL, "datasetType": "grain", "datasetPath": "gs://my-data/c4/*.array_record"})
    lookups = Lookups(lambda b, p, t: ([n for n in bucket if gcs_glob(p).fullmatch(n)], None), lambda b, n: "")
    with pytest.raises(ConfigError) as error:
        look_up(config, lookups)
    assert "matches no file" in error.value.problems[0]


@pytest.mark.parametrize("pattern,folder", [
    ("c4/en/train-*.array_record", "c4/en"), ("c4/*/train-*.array_record", "c4"), ("*.parquet", ""),
    ("c4/train-000.array_record", "c4"), ("c[4]/x.parquet", ""),
])
def test_the_literal_folder_is_what_every_match_lies_under(pattern, folder):
    assert literal_folder(pattern) == folder
