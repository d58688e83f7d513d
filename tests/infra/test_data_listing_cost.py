"""A data look-up costs one objects.list page, not the data set: it stops at the first page holding a file MaxText
reads and says "at least N" when more exist (infra/data_lookups.py).

Why not the provider's data source: pulumi-gcp 10.2.0's storage.get_bucket_objects takes only bucket, match_glob
and prefix (pulumi_gcp/storage/get_bucket_objects.py in the installed package: no page size, no limit), so its
provider reads every page of matches; the test below proves the installed signature still has no such input, so
the choice is re-made if a later provider adds one. objects.list pages hold at most 1000 items (maxResults,
https://cloud.google.com/storage/docs/json_api/v1/objects/list); the program's requests go to preview.harness's
played API, which pages as the real one does.
"""
from __future__ import annotations

import inspect
import urllib.parse

import pulumi_gcp as gcp
import pytest

from infra.config import build
from infra.data_lookups import LIST_PAGE, Lookups, look_up
from preview import harness
from preview.harness import gcs_glob, run_program
from tests.conftest import MINIMAL

DATA = "gs://my-data/c4/train-*.array_record"
SHARDS = {f"c4/train-{index:05d}.array_record": "" for index in range(2500)}


@pytest.fixture
def cloud_storage():
    harness.GCS_OBJECTS, harness.LIST_REQUESTS[:] = {}, []
    yield harness.GCS_OBJECTS
    harness.GCS_OBJECTS = None


def _data_requests() -> list[dict]:
    queries = [dict(urllib.parse.parse_qsl(urllib.parse.urlparse(url).query)) for url in harness.LIST_REQUESTS]
    return [query for query in queries if query["matchGlob"] == "c4/train-*.array_record"]


def test_the_provider_data_source_still_has_no_page_or_limit_input():
    assert set(inspect.signature(gcp.storage.get_bucket_objects).parameters) == {"bucket", "match_glob", "prefix",
                                                                              "opts"}


def test_a_large_data_set_costs_one_page_and_is_shown_as_at_least(cloud_storage):
    cloud_storage["my-data"] = dict(SHARDS)
    run = run_program({**MINIMAL, "datasetType": "grain", "datasetPath": DATA})
    [request] = _data_requests()
    assert request["maxResults"] == str(LIST_PAGE) == "1000" and "pageToken" not in request
    assert "at least 1000 file(s) found" in run.outputs["run"]


def test_a_data_set_within_one_page_is_counted_exactly(cloud_storage):
    cloud_storage["my-data"] = dict(list(SHARDS.items())[:40])
    run = run_program({**MINIMAL, "datasetType": "grain", "datasetPath": DATA})
    assert len(_data_requests()) == 1
    assert ", 40 file(s) found" in run.outputs["run"] and "at least" not in run.outputs["run"]


def _paged(objects: dict[str, list[str]], page: int, calls: list) -> Lookups:
    """Cloud Storage with pages of `page` names (lexicographic, as objects.list returns them)."""
    def list_objects(bucket, pattern, token):
        calls.append((bucket, pattern, token))
        names = sorted(name for name in objects[bucket] if gcs_glob(pattern).fullmatch(name))
        start = int(token or 0)
        more = start + page < len(names)
        return names[start:start + page], (str(start + page) if more else None)
    return Lookups(list_objects, lambda bucket, name: "")


def test_a_first_page_of_nothing_maxtext_reads_asks_for_the_next():
    """Dot-files sort first ('.' before letters): a page of them says nothing about the data yet."""
    names = [f"c4/.train-{i}.array_record" for i in range(3)] + ["c4/train-0.array_record"]
    calls: list = []
    config = build({**MINIMAL, "datasetType": "grain", "datasetPath": "gs://my-data/c4/*.array_record"})
    facts = look_up(config, _paged({"my-data": names, config.storage.bucket_name: []}, 2, calls))
    assert dict(facts.data_files)["datasetPath"] == 1 and facts.data_files_at_least == ()
    assert [token for bucket, _, token in calls if bucket == "my-data"] == [None, "2"]


def test_the_run_checkpoints_are_read_on_every_page():
    """The newest checkpoint may be on any page (step directories sort as text: 0, 100, 150, 50)."""
    config = build({**MINIMAL, "runName": "r1"})
    steps = [f"maxtext/r1/checkpoints/{step}/_CHECKPOINT_METADATA" for step in (0, 50, 100, 150)]
    facts = look_up(config, _paged({config.storage.bucket_name: steps}, 1, []))
    assert facts.latest_step == 150
