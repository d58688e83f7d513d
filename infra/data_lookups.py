"""What Cloud Storage says about the run before anything is registered: do the data globs match files, does the run
already have checkpoints (so this `up` starts, resumes, or launches a run that has finished), and are the starting
weights shaped for the model.

Why here and not in config build: only the Cloud Storage API can answer, and like infra/preflight.py's look-ups
these run with plain values before any resource registers, so a refusal half-creates nothing. What a look-up cannot
list (no permission where `pulumi up` runs, a transient error) is a warning, not a refusal: the pods read with
their own identity, and the job reports a missing file itself. Reading an object goes through the Google
provider's invoke (gcp.storage.get_bucket_object_content: objects.get). Listing a data glob asks Cloud Storage's
objects.list for one page only: the provider's data source (pulumi-gcp 10.2.0 storage.get_bucket_objects) takes
bucket, match_glob and prefix and nothing that limits or pages it, and its provider reads every page of matches,
so each preview of a large data set would list all of its files only to learn there are some. So the listing
calls the JSON API itself, with the provider's own access token (gcp.organizations.get_client_config, as
infra/worker_image.py does), and stops at the first page that has a file MaxText reads: "at least N" when more
pages exist. Tests inject both reads (`Lookups`); the offline plan plays the API (preview/harness.py).
"""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

from core.presets import PRESETS, ModelPreset
from infra.config import NAMESPACE, ConfigError, StackConfig
from infra.config.data_globs import maxtext_reads
from infra.config.key_checks import split_gs_path

_INVOKE_FAILED = re.compile(r"^invoke of \S+ failed: |\s*\(\w+\)$")
# How a look-up says the bucket or object is absent (the Storage API's 404), as infra/preflight.py reads it.
_NOT_FOUND = re.compile(r"Error 404|notFound|not found|does not exist|No such object", re.IGNORECASE)
# Orbax writes this file into every step directory it saves (orbax/checkpoint/_src/metadata/checkpoint.py
# _STEP_METADATA_FILENAME); MaxText keeps a run's steps in <base_output_directory>/<run_name>/checkpoints/<step>.
STEP_METADATA = "_CHECKPOINT_METADATA"
# The PyTree metadata file of an Orbax checkpoint: every leaf's key path and, per array, the shape it was written
# in (orbax/checkpoint/_src/metadata/value_metadata_entry.py write_shape: the whole array when saved unsharded, as
# MaxText's conversion scripts do on CPU; one shard's shape when saved sharded).
PYTREE_METADATA = "_METADATA"


class LookupFailed(Exception):
    """A look-up that could not answer (not a 'not found')."""


# One objects.list page: the JSON API's largest maxResults (https://cloud.google.com/storage/docs/json_api/v1/
# objects/list, "maxResults": at most 1000 items per page).
LIST_PAGE = 1000
STORAGE_API = "https://storage.googleapis.com/storage/v1"
# A page: the names on it, and the token of the next page (None: the last page).
Page = tuple[list[str], "str | None"]


@dataclass(frozen=True)
class Lookups:
    """The two Cloud Storage reads, injectable: one page of object names (bucket, match_glob, page token) and
    one object's content."""
    list_objects: Callable[[str, str, "str | None"], Page]
    read_object: Callable[[str, str], str]


def _get_json(url: str, token: str) -> dict:
    """GET a JSON API URL as the provider's identity; an HTTP error is raised with the API's own message and
    reason (404: notFound, which _attempt reads as 'not found')."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        try:
            message = json.loads(error.read().decode(errors="replace"))["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = error.reason
        reason = "notFound" if error.code == 404 else str(error.reason)
        raise LookupFailed(f"Error {error.code}: {message}, {reason}") from None


# Where objects.list requests go: (URL, access token) -> the JSON answer. The offline plan and the tests play
# Cloud Storage here (preview/harness.py), never in `pulumi up`.
storage_get: Callable[[str, str], dict] = _get_json


def list_url(bucket: str, match_glob: str, page_token: str | None) -> str:
    query = {"matchGlob": match_glob, "maxResults": str(LIST_PAGE), "fields": "items(name),nextPageToken"}
    if page_token:
        query["pageToken"] = page_token
    return f"{STORAGE_API}/b/{urllib.parse.quote(bucket, safe='')}/o?{urllib.parse.urlencode(query)}"


def gcp_lookups() -> Lookups:
    import pulumi_gcp as gcp

    tokens: list[str] = []

    def access_token() -> str:
        if not tokens:
            tokens.append(gcp.organizations.get_client_config().access_token)
        return tokens[0]

    def list_objects(bucket: str, match_glob: str, page_token: str | None = None) -> Page:
        answer = storage_get(list_url(bucket, match_glob, page_token), access_token())
        return [item["name"] for item in answer.get("items") or ()], answer.get("nextPageToken") or None

    def read_object(bucket: str, name: str) -> str:
        return gcp.storage.get_bucket_object_content(bucket=bucket, name=name).content

    return Lookups(list_objects, read_object)


def readable_files(lookups: Lookups, bucket: str, pattern: str) -> tuple[list[str], bool]:
    """The files MaxText's glob reads (config/data_globs.py maxtext_reads) among those matchGlob lists, page by
    page until a page has one: (those files, whether more pages were left unread). A data set of any size costs
    one page when its first page holds data; a page of nothing readable (dot-files) asks for the next."""
    token: str | None = None
    while True:
        names, token = lookups.list_objects(bucket, pattern, token)
        readable = [name for name in names if maxtext_reads(pattern, name)]
        if readable or token is None:
            return readable, token is not None


@dataclass(frozen=True)
class RunFacts:
    """What the look-ups found: files per data glob, the run's newest checkpoint step, and warnings."""
    data_files: tuple[tuple[str, int], ...] = ()          # (key, matching files) for each glob that could be listed
    latest_step: int | None = None                        # newest checkpoint step of this run; None: none found
    run_listed: bool = True                               # False: the checkpoints could not be listed
    warnings: tuple[str, ...] = field(default_factory=tuple)
    data_files_at_least: tuple[str, ...] = ()        # keys whose count is of the first page only ("at least")

    def action(self, train_steps: int) -> str:
        """start, resume, finished or unknown (what this `up`'s job does with the run's checkpoints). A
        checkpoint at step S means S+1 steps are done (maxtext common/checkpointing.py maybe_save_checkpoint)."""
        if not self.run_listed:
            return "unknown"
        if self.latest_step is None:
            return "start"
        return "finished" if self.latest_step + 1 >= train_steps else "resume"


def _attempt(call: Callable[[], object]) -> tuple[object | None, str | None]:
    """(answer, None), (None, 'not found') or (None, the first line of the error)."""
    try:
        return call(), None
    except Exception as error:  # noqa: BLE001 (the provider's invoke errors are plain Exceptions)
        text = str(error).strip()
        if _NOT_FOUND.search(text):
            return None, "not found"
        first = text.splitlines()[0] if text else type(error).__name__
        # The provider's "invoke of TOKEN failed: REASON (FIELD)" says nothing the user needs but the reason.
        return None, _INVOKE_FAILED.sub("", first)


def _glob_of(path: str) -> tuple[str, str]:
    bucket, pattern = split_gs_path(path)
    return bucket, pattern


def look_up(config: StackConfig, lookups: Lookups) -> RunFacts:
    """Raises ConfigError (one line per mistake) for a glob that matches nothing and weights shaped for another
    model; warns for what could not be looked up."""
    run, problems, warnings = config.workload.run, [], []
    counts, partly = [], []
    for key, path in (("datasetPath", run.dataset_path), ("evalDatasetPath", run.eval_dataset_path)):
        if not path:
            continue
        bucket, pattern = _glob_of(path)
        # matchGlob's answer, narrowed to the files MaxText's glob reads on the mount (config/data_globs.py:
        # names that start with '.' under a wildcard): the count shown is what the run will read.
        listed, failure = _attempt(lambda: readable_files(lookups, bucket, pattern))
        names, more = listed if listed is not None else ([], False)
        if failure == "not found" or (failure is None and not names):
            why = "its bucket does not exist" if failure else "no object matches it"
            problems.append(f"{NAMESPACE}:{key}={path!r} matches no file ({why}, listed through the Cloud Storage "
                            "API); allowed: a glob that matches your ArrayRecord or Parquet files")
        elif failure:
            warnings.append(f"{NAMESPACE}:{key} not listed ({failure}): not checked before the run")
        else:
            counts.append((key, len(names)))
            partly += [key] if more else []
    if run.load_parameters_path:
        problems += _weights_problems(run.load_parameters_path, config.workload.model, lookups, warnings)
    latest, listed = _latest_step(config, lookups, warnings)
    if problems:
        raise ConfigError(problems)
    facts = RunFacts(data_files=tuple(counts), latest_step=latest, run_listed=listed, warnings=tuple(warnings),
                     data_files_at_least=tuple(partly))
    if facts.action(config.workload.train_steps) == "finished":
        warnings.append(f"{NAMESPACE}:runName={run.run_name!r} has finished (a checkpoint at step {latest} of "
                        f"trainSteps={config.workload.train_steps}): its job would stop at once (MaxText refuses "
                        "to train a run past its steps); name a new run to train again, or raise trainSteps to "
                        "train on")
        facts = RunFacts(facts.data_files, latest, listed, tuple(warnings), facts.data_files_at_least)
    return facts


def _latest_step(config: StackConfig, lookups: Lookups, warnings: list[str]) -> tuple[int | None, bool]:
    """The run's newest saved step under gs://BUCKET/maxtext/RUN/checkpoints, and whether it could be listed (a
    bucket that does not exist yet has no checkpoints: a first `up`)."""
    pattern = f"maxtext/{config.workload.run.run_name}/checkpoints/*/{STEP_METADATA}"
    names, failure = _attempt(lambda: _every_name(lookups, config.storage.bucket_name, pattern))
    if failure == "not found":
        return None, True
    if failure:
        warnings.append(f"{NAMESPACE}:runName checkpoints not listed ({failure}): start or resume not known")
        return None, False
    steps = [int(part) for name in names or () if (part := name.split("/")[-2]).isdigit()]
    return (max(steps) if steps else None), True


def _every_name(lookups: Lookups, bucket: str, pattern: str) -> list[str]:
    """Every page: a run's checkpoints are few (one per checkpointPeriod steps, MaxText keeps them all)."""
    names, token = lookups.list_objects(bucket, pattern, None)
    while token is not None:
        page, token = lookups.list_objects(bucket, pattern, token)
        names += page
    return names


def _weights_problems(path: str, model: str, lookups: Lookups, warnings: list[str]) -> list[str]:
    bucket, prefix = split_gs_path(path)
    name = f"{prefix.rstrip('/')}/{PYTREE_METADATA}"
    text, failure = _attempt(lambda: lookups.read_object(bucket, name))
    if failure == "not found":
        return [f"{NAMESPACE}:loadParametersPath={path!r} is not an Orbax checkpoint: it has no {PYTREE_METADATA} "
                "file (listed through the Cloud Storage API); allowed: the directory of a checkpoint's "
                "parameters, e.g. gs://BUCKET/llama3-8b/0/items from MaxText's conversion tools"]
    if failure:
        warnings.append(f"{NAMESPACE}:loadParametersPath not read ({failure}): checked at load")
        return []
    try:
        metadata = json.loads(text)
    except ValueError:
        warnings.append(f"{NAMESPACE}:loadParametersPath: {PYTREE_METADATA} is not JSON; shapes checked when the "
                        "run loads it")
        return []
    preset = PRESETS[model]
    reasons = checkpoint_problems(metadata, preset)
    if not reasons:
        return []
    return [f"{NAMESPACE}:loadParametersPath={path!r} is not {model}'s weights: it {' and '.join(reasons)}; "
            f"allowed: a checkpoint of {model} ({preset.num_layers} layers, width {preset.emb_dim}, vocabulary "
            f"{preset.vocab_size})"]


def _leaves(metadata: dict) -> dict[tuple[str, ...], list[int] | None]:
    """Leaf key path → write_shape (None when the leaf has none), from Orbax's tree_metadata."""
    leaves = {}
    for entry in (metadata.get("tree_metadata") or {}).values():
        keys = tuple(str(part.get("key")) for part in entry.get("key_metadata") or ())
        shape = (entry.get("value_metadata") or {}).get("write_shape")
        leaves[keys] = list(shape) if isinstance(shape, list) else None
    return leaves


def checkpoint_problems(metadata: dict, preset: ModelPreset) -> list[str]:
    """Why a MaxText parameter checkpoint cannot be `preset`'s weights, as phrases after "it" (empty when
    nothing says so). Checked from
    the leaf names and the shapes Orbax wrote: the decoder's layer count (the scan axis, 1 in MaxText's scanned
    layers, is never sharded), the embedding (vocabulary x width, or a shard that divides it) and Qwen3's q/k
    norms."""
    leaves = _leaves(metadata)
    if not leaves:
        return []
    problems = []
    scanned = [shape for keys, shape in leaves.items()
               if keys[-5:] == ("decoder", "layers", "mlp", "wi_0", "kernel") and shape and len(shape) == 3]
    unscanned = {keys[keys.index("decoder") + 1] for keys in leaves
                 if "decoder" in keys and keys.index("decoder") + 1 < len(keys)
                 and re.fullmatch(r"layers_\d+", keys[keys.index("decoder") + 1])}
    layers = scanned[0][1] if scanned else (len(unscanned) if unscanned else None)
    if layers is not None and layers != preset.num_layers:
        problems.append(f"holds {layers} decoder layers")
    embedding = next((shape for keys, shape in leaves.items() if keys[-2:] == ("token_embedder", "embedding")
                      and shape and len(shape) == 2), None)
    if embedding is not None and any(size < 1 or full % size for size, full in
                                     zip(embedding, (preset.vocab_size, preset.emb_dim))):
        problems.append(f"holds a token embedding written as {embedding[0]} x {embedding[1]}, not (a shard of) "
                        f"{preset.vocab_size} x {preset.emb_dim}")
    has_qk_norm = any("query_norm" in keys for keys in leaves)
    if not problems and any(keys[:3] == ("params", "params", "decoder") for keys in leaves) \
            and has_qk_norm != preset.qk_norm:
        problems.append(f"{'has' if has_qk_norm else 'lacks'} per-head q/k norms (query_norm), which "
                        f"{preset.name} {'lacks' if has_qk_norm else 'has'}")
    return problems
