"""The attempts record's Cloud Storage store (trainer/jobset_attempts.py GcsStore) through the real
google-cloud-storage client, against a loopback server with the service's generation rules
(tests/trainer/gcs_json_stub.py; https://cloud.google.com/storage/docs/request-preconditions): the client's own
request building, upload and download paths and its 412 -> PreconditionFailed mapping, which the fake bucket of
tests/trainer/test_jobset_attempts.py stands in for. What stays an assumption: the live service's answers
themselves (no bucket here)."""
from __future__ import annotations

import pytest

pytest.importorskip("google.cloud.storage")

from tests.trainer.gcs_json_stub import GcsJsonStub  # noqa: E402
from trainer import jobset_attempts as ja  # noqa: E402

UID = "uid-1"
NAME = "maxtext/run/" + ja.RECORD_NAME


@pytest.fixture
def stub():
    with GcsJsonStub() as server:
        yield server


def _store(stub: GcsJsonStub) -> ja.GcsStore:
    return ja.GcsStore(f"gs://bucket/{NAME}", bucket=stub.client().bucket("bucket"))


def test_a_write_lands_only_over_the_generation_it_read(stub):
    store = _store(stub)
    assert store.read() == (None, 0)
    assert store.write("a", 0)                 # ifGenerationMatch=0: only while no object exists
    assert not store.write("b", 0)
    text, generation = store.read()
    assert text == "a" and generation == stub.objects.live[("bucket", NAME)].generation
    assert store.write("c", generation) and not store.write("d", generation)
    assert store.read()[0] == "c"
    uploads = [query for method, _, query in stub.objects.requests if method == "POST"]
    assert [query.get("ifGenerationMatch") for query in uploads] == ["0", "0", str(generation), str(generation)]


def test_a_read_that_races_a_write_reads_the_newer_text_whole(stub):
    store = _store(stub)
    assert store.write("old", 0)

    def another_writer(objects, path):
        if not path.startswith("/download/"):
            return False
        objects.write("bucket", NAME, b"new")
        return True

    # Between the metadata (generation G) and the download pinned to G, another host writes: the service answers
    # 412 and the store reads again, never returning one generation's number with another's text.
    stub.objects.meddle = another_writer
    text, generation = store.read()
    assert (text, generation) == ("new", stub.objects.live[("bucket", NAME)].generation)
    downloads = [query for method, path, query in stub.objects.requests if path.startswith("/download/")]
    assert len(downloads) == 2 and all("ifGenerationMatch" in query for query in downloads)


def test_attempts_without_a_new_checkpoint_end_the_run_through_the_real_client(stub):
    store = _store(stub)
    assert ja.start_attempt(store, lambda: 200, UID, 0, 3) is None
    for attempt in (1, 2):
        ja.note_ending(store, UID, attempt - 1, "a notice (saved)")
        assert ja.start_attempt(store, lambda: 200, UID, attempt, 3) is None
    ja.note_ending(store, UID, 2, "a notice (saved)")
    assert ja.start_attempt(store, lambda: 200, UID, 3, 3) is not None
    assert ja.Record.load(store.read()[0]).attempt == 3
