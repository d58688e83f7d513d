"""Run the real program (__main__.py) under Pulumi mocks and record everything it registers.

No Pulumi CLI, provider plugin or cloud credential is involved (docs/platform-notes.md §2). Used by the tests and by the
offline plan. Every run gets a fresh event loop, config, monitor and root stack, so runs do not leak into
each other.
"""
from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import re
import runpy
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
from google.protobuf import struct_pb2
from pulumi.runtime import mocks as pulumi_mocks
from pulumi.runtime import rpc, settings
from pulumi.runtime.config import set_all_config
from pulumi.runtime.stack import run_in_stack

from infra import cluster_ref, data_lookups
from workloads import compile_check
from infra.config.schema import NAMESPACE

PROJECT_ROOT = Path(__file__).resolve().parent.parent
FAKE_PROJECT_NUMBER = "123456789012"
# Who runs `pulumi up` under mocks (the provider's OpenID user info of its credentials).
FAKE_DEPLOYER = "deployer@example.com"
CLIENT_USER_INFO_TOKEN = "gcp:organizations/getClientOpenIdUserInfo:getClientOpenIdUserInfo"
# Cloud Monitoring gives a dashboard a generated id; the provider's resource id is its resource name
# projects/<project number>/dashboards/<id> (what infra.monitoring derives the console URL from).
FAKE_DASHBOARD_ID = "0a1b2c3d-4e5f-6789-abcd-ef0123456789"


class UnexpectedInvoke(AssertionError):
    pass


class GcpMocks(pulumi.runtime.Mocks):
    """Fills the outputs a real provider would compute, by type token; refuses unknown invokes."""

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict]:
        state = dict(args.inputs)
        name = state.get("name") or args.name
        state.setdefault("name", name)
        token = args.typ
        if token == "gcp:container/cluster:Cluster":
            state["endpoint"] = "203.0.113.10"
            state["masterAuth"] = {"clusterCaCertificate": "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0t"}
            endpoints = dict(state.get("controlPlaneEndpointsConfig") or {})
            endpoints["dnsEndpointConfig"] = {**(endpoints.get("dnsEndpointConfig") or {}),
                                              "endpoint": f"gke-0a1b2c3d4e5f-{FAKE_PROJECT_NUMBER}.{state.get('location')}"
                                                          ".gke.goog"}
            state["controlPlaneEndpointsConfig"] = endpoints
        elif token == "gcp:storage/bucket:Bucket":
            state["url"] = f"gs://{name}"
        elif token == "gcp:serviceaccount/account:Account":
            state["email"] = f"{state['accountId']}@{state['project']}.iam.gserviceaccount.com"
            state["uniqueId"] = account_unique_id(state["project"], state["accountId"])
            # The account's resource name, what a service account IAM binding names it by.
            state["name"] = f"projects/{state['project']}/serviceAccounts/{state['email']}"
        elif token.startswith("gcp:compute/"):
            state["selfLink"] = f"https://www.googleapis.com/compute/v1/projects/{state.get('project')}/{name}"
        if token == STACK_REFERENCE_TOKEN:                  # a run stack reading its cluster stack's exports
            return args.resource_id or args.name, stack_reference_state(args.resource_id or args.name)
        if token == CRD_TOKEN and args.resource_id:       # CustomResourceDefinition.get: the served CRD
            return args.resource_id, served_crd(args.resource_id)
        resource_id = f"{name}-id" if token.startswith("kubernetes:") else name
        if token.startswith("gcp:compute/") or token.startswith("gcp:container/"):
            resource_id = f"projects/{state.get('project')}/{token.split('/')[1].split(':')[0]}s/{name}"
        if token == "gcp:monitoring/dashboard:Dashboard":
            resource_id = f"projects/{FAKE_PROJECT_NUMBER}/dashboards/{FAKE_DASHBOARD_ID}"
        return resource_id, state

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict:
        if args.token == "gcp:organizations/getProject:getProject":
            return {"number": FAKE_PROJECT_NUMBER, "projectId": args.args.get("projectId")}
        if args.token == CLIENT_USER_INFO_TOKEN:
            return {"email": FAKE_DEPLOYER, "id": FAKE_DEPLOYER}
        if args.token == "gcp:organizations/getClientConfig:getClientConfig":
            return {"accessToken": "mock-access-token", "project": "", "region": "", "zone": "", "id": "mock"}
        if args.token == ENGINE_VERSIONS_TOKEN:
            return {**OFFERED_GKE_VERSIONS, "location": args.args.get("location"),
                    "project": args.args.get("project")}
        # Existence look-ups (infra/preflight.py) answer like the provider when nothing exists yet, which is what a
        # first `pulumi up` sees; tests put names in EXISTING to play a later one.
        if args.token == GET_BUCKET_TOKEN:
            name = args.args.get("name")
            if name in EXISTING["buckets"]:
                return {"name": name, "url": f"gs://{name}", "projectNumber": int(FAKE_PROJECT_NUMBER),
                        **KEPT_BUCKETS.get(name, {})}
            # The stack's own bucket (looked up in the stack's project) does not exist before a first `up`.
            if args.args.get("project") or (GCS_OBJECTS is not None and name not in GCS_OBJECTS):
                return {}, [("name", "googleapi: Error 404: The specified bucket does not exist., notFound")]
            # Someone's data bucket: in the project BUCKET_PROJECTS names, else (and always offline) in the stack's.
            answer = BUCKET_PROJECTS.get(name, FAKE_PROJECT_NUMBER)
            if answer.startswith("googleapi:"):
                return {}, [("name", answer)]
            return {"name": name, "url": f"gs://{name}", "projectNumber": int(answer)}
        if args.token == GET_BUCKET_POLICY_TOKEN:
            return {"bucket": args.args.get("bucket"), "id": f"b/{args.args.get('bucket')}", "etag": "BwX",
                    "policyData": json.dumps(BUCKET_POLICIES.get(args.args.get("bucket"), {"bindings": []}))}
        if args.token == GET_CLUSTER_TOKEN:
            if args.args.get("name") in EXISTING["clusters"]:
                return {"name": args.args["name"], "location": args.args.get("location")}
            return {}, [("name", f"projects/{args.args.get('project')}/locations/{args.args.get('location')}/"
                                 f"clusters/{args.args.get('name')} not found")]
        if args.token == READ_STACK_OUTPUTS:              # config build of a run stack (infra/cluster_ref.py)
            name = args.args.get("name")
            if name not in STACK_OUTPUTS:
                return {}, [("name", f"unknown stack {name!r}")]
            return stack_reference_state(name)
        if args.token == READ_OBJECT_TOKEN and GCS_OBJECTS is None:
            return {}, [("bucket", OFFLINE_STORAGE)]
        if args.token == READ_OBJECT_TOKEN:
            bucket, name = args.args.get("bucket"), args.args.get("name")
            if name not in GCS_OBJECTS.get(bucket, {}):
                return {}, [("name", "googleapi: Error 404: No such object: " f"{bucket}/{name}, notFound")]
            return {"bucket": bucket, "name": name, "id": f"{bucket}/{name}", "content": GCS_OBJECTS[bucket][name]}
        raise UnexpectedInvoke(f"unmocked invoke {args.token} {args.args}")


def account_unique_id(project: str, account_id: str) -> str:
    """A service account's uniqueId under mocks: 21 digits, the same on every run, a different one for each
    ACCOUNT_CREATION (IAM gives a re-created account of the same name a new uniqueId; tests bump it to play a
    `pulumi destroy` followed by `pulumi up`)."""
    seed = f"{project}/{account_id}/{ACCOUNT_CREATION['n']}".encode()
    return str(int(hashlib.sha256(seed).hexdigest(), 16) % 10 ** 21).rjust(21, "1")


# Which creation of the stack's service accounts the mocks play (0: the first `pulumi up`).
ACCOUNT_CREATION = {"n": 0}
ENGINE_VERSIONS_TOKEN = "gcp:container/getEngineVersions:getEngineVersions"
GET_BUCKET_TOKEN = "gcp:storage/getBucket:getBucket"
GET_CLUSTER_TOKEN = "gcp:container/getCluster:getCluster"
GET_BUCKET_POLICY_TOKEN = "gcp:storage/getBucketIamPolicy:getBucketIamPolicy"
# The IAM policy of an existing bucket (name -> policy JSON as Cloud Storage returns it); unset: no bindings.
BUCKET_POLICIES: dict[str, dict] = {}
# The project number of a data or weights bucket the run reads (name -> number), or the error its look-up gets
# ("googleapi: Error 403: ..."); unset: the stack's own project, which is also what the offline plan assumes.
BUCKET_PROJECTS: dict[str, str] = {}
# Names the existence look-ups find (empty: a first `pulumi up`).
EXISTING: dict[str, set[str]] = {"buckets": set(), "clusters": set()}
# The run's Cloud Storage look-ups (infra/data_lookups.py). None (the offline plan): there is no Cloud Storage to
# ask, and every look-up fails with OFFLINE_STORAGE, which the program reports as "could not be listed" (a
# warning, never a refusal). A dict plays Cloud Storage: bucket → object name → content, and a bucket not in it
# does not exist (404); tests put data files, checkpoints and checkpoint metadata here.
READ_OBJECT_TOKEN = "gcp:storage/getBucketObjectContent:getBucketObjectContent"
OFFLINE_STORAGE = "offline: no Cloud Storage"
GCS_OBJECTS: dict[str, dict[str, str]] | None = None


# What a StackReference reads under mocks: a cluster stack's exports (fully qualified stack name -> (outputs, the
# names of its secret outputs)). run_program fills it from the cluster stack's own program run under mocks, read
# from its Pulumi.<stack>.yaml beside the program, before it runs a run stack; tests may put other outputs here
# (a cluster that is gone: no entry, which a real StackReference answers with an error).
STACK_REFERENCE_TOKEN = "pulumi:pulumi:StackReference"
READ_STACK_OUTPUTS = cluster_ref.READ_STACK_OUTPUTS
STACK_OUTPUTS: dict[str, tuple[dict[str, Any], set[str]]] = {}
# The cluster stacks' own program runs behind STACK_OUTPUTS, where the harness made them.
CLUSTER_RUNS: dict[str, "ProgramRun"] = {}


class MissingStack(AssertionError):
    pass


def stack_reference_state(name: str) -> dict:
    if name not in STACK_OUTPUTS:
        # What the engine says of a referenced stack that does not exist (pulumi/pulumi pkg/resource/deploy
        # builtins.go: "unknown stack").
        raise MissingStack(f"unknown stack {name!r}")
    outputs, secret = STACK_OUTPUTS[name]
    return {"name": name, "outputs": dict(outputs), "secretOutputNames": sorted(secret)}


def play_cluster_stack(raw_config: dict[str, Any], program: Path) -> None:
    """Before a run stack runs: its cluster stack's program under mocks, from the cluster stack's config file
    beside the program, its exports kept in STACK_OUTPUTS (once per name; tests may have put their own)."""
    reference = raw_config.get("clusterStack")
    if not isinstance(reference, str) or reference in STACK_OUTPUTS or reference.count("/") != 2:
        return
    from preview.stack_files import StackFileError, load_stack_config

    cluster = reference.rsplit("/", 1)[1]
    try:
        cluster_raw = load_stack_config(cluster, program.parent)
    except StackFileError:
        return          # no such stack here: the run's reference fails like a real one (unknown stack)
    run = run_program(cluster_raw, stack=cluster, program=program)
    STACK_OUTPUTS[reference] = (run.outputs, run.secret_outputs)
    CLUSTER_RUNS[reference] = run


def played_outputs(root: Path = PROJECT_ROOT):
    """What config build reads a run stack's cluster stack with offline (infra/config/stack_role.py
    ClusterOutputs): the cluster stack's own program played under mocks from its Pulumi.<stack>.yaml in `root`
    (once per name), or what a test put in STACK_OUTPUTS."""
    def read(reference: str) -> dict[str, Any]:
        play_cluster_stack({"clusterStack": reference}, root / "__main__.py")
        if reference not in STACK_OUTPUTS:
            raise LookupError(f"unknown stack {reference!r}")
        return dict(STACK_OUTPUTS[reference][0])
    return read


def cluster_outputs_reader(raw: dict[str, Any], root: Path = PROJECT_ROOT):
    """played_outputs for a run stack's config (one with clusterStack); None for other stacks, which read none."""
    return played_outputs(root) if "clusterStack" in raw else None


class _WithoutOfflineStorage(logging.Filter):
    """Drops the program's warnings that only say Cloud Storage was not reached: offline that is every run's normal
    state, which the plan states once among its assumptions (preview/assumptions.py), not as a warning per look-up.
    Every other warning of the program goes on as the Pulumi mocks log it (the root logger: stderr, caplog)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return OFFLINE_STORAGE not in record.getMessage()


# The logger the mocked engine writes the program's pulumi.log messages to.
PROGRAM_LOG = logging.getLogger("tpu-multislice.program")
PROGRAM_LOG.addFilter(_WithoutOfflineStorage())


# Every objects.list request the program made (URL), in order, while tests look (infra/data_lookups.py lists
# through the JSON API, not an invoke).
LIST_REQUESTS: list[str] = []
real_storage_get = data_lookups.storage_get


def play_objects_list(url: str, token: str) -> dict:
    """Cloud Storage's objects.list (https://cloud.google.com/storage/docs/json_api/v1/objects/list) over
    GCS_OBJECTS: names in lexicographic order, matchGlob, pages of maxResults with nextPageToken."""
    LIST_REQUESTS.append(url)
    if GCS_OBJECTS is None:
        raise RuntimeError(OFFLINE_STORAGE)
    parsed = urllib.parse.urlparse(url)
    bucket = urllib.parse.unquote(parsed.path.split("/b/", 1)[1].split("/o", 1)[0])
    query = dict(urllib.parse.parse_qsl(parsed.query))
    if bucket not in GCS_OBJECTS:
        raise RuntimeError("Error 404: The specified bucket does not exist., notFound")
    pattern = gcs_glob(query.get("matchGlob") or "**")
    names = [name for name in sorted(GCS_OBJECTS[bucket]) if pattern.fullmatch(name)]
    start, size = int(query.get("pageToken") or 0), int(query.get("maxResults") or 1000)
    answer: dict = {"items": [{"name": name} for name in names[start:start + size]]}
    if start + size < len(names):
        answer["nextPageToken"] = str(start + size)
    return answer


def gcs_glob(pattern: str) -> re.Pattern:
    """A Cloud Storage matchGlob as a regex, per "List objects and prefixes using glob"
    (https://cloud.google.com/storage/docs/json_api/v1/objects/list#list-objects-and-prefixes-using-glob):
    '*' any characters but '/', '**' any characters including '/', '?' one character but '/', '[chars]',
    '[a-z]' and '[!chars]' one of (or none of) the characters, '{a,b}' one of the comma-separated strings, '\\'
    makes the next character literal. Nothing else is special: a name that starts with '.' is matched like
    any other."""
    out, index = [], 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\" and index + 1 < len(pattern):
            out.append(re.escape(pattern[index + 1]))
            index += 2
            continue
        if pattern.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            if (end := pattern.find("]", index + 1)) == -1:
                # The table gives an unclosed '[' no meaning: played as a pattern Cloud Storage refuses.
                raise re.error(f"unclosed '[' in {pattern!r}")
            body = pattern[index + 1:end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            out.append(("[^" if negate else "[") + body.replace("\\", "\\\\") + "]")
            index = end + 1
            continue
        elif char == "{" and (end := pattern.find("}", index + 1)) != -1:
            out.append("(?:" + "|".join(gcs_glob(part).pattern for part in pattern[index + 1:end].split(",")) + ")")
            index = end + 1
            continue
        else:
            out.append(re.escape(char))
        index += 1
    return re.compile("".join(out))


# What the bucket look-up reads of an existing bucket (name -> get_bucket result, wire keys: location,
# hierarchicalNamespaces, softDeletePolicies, lifecycleRules, labels); tests fill it to play a kept bucket.
KEPT_BUCKETS: dict[str, dict] = {}
CRD_TOKEN = "kubernetes:apiextensions.k8s.io/v1:CustomResourceDefinition"
# CRDs the cluster serves when the program reads them (name -> CRD spec, wire keys). Unset names answer with the
# shared schema bundle's CRD (KubeRay v1.7.0 for rayjobs.ray.io); tests put an older schema here to play an
# older GKE Ray add-on.
SERVED_CRDS: dict[str, dict] = {}


@functools.lru_cache(maxsize=None)
def bundled_crd_spec(name: str) -> dict | None:
    """The spec of CRD `name` (plural.group) from the pinned CRDs (preview/k8s/crd_fetch.py), or None without them."""
    from preview.k8s.crd_fetch import find_schemas
    from preview.k8s.crd_schemas import load_crd_documents
    plural, group = name.split(".", 1)
    directory = find_schemas().directory
    for path in sorted(directory.rglob(f"{group}_{plural}.yaml") if directory else ()):
        for document in load_crd_documents(path):
            if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                return document["spec"]
    return None


def served_crd(name: str) -> dict:
    """What reading CRD `name` returns under mocks. Without the schema bundle: a schema that keeps every field,
    so the offline plan passes and the real check happens at `pulumi up` against the cluster's CRD."""
    spec = (_underscored_extensions(SERVED_CRDS[name]) if name in SERVED_CRDS else _bundled_served(name)) or {
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {
            "openAPIV3Schema": {"type": "object", "x_kubernetes_preserve_unknown_fields": True}}}]}
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": name}, "spec": spec}


@functools.lru_cache(maxsize=None)
def _bundled_served(name: str) -> dict | None:
    return _underscored_extensions(_storage_version_only(bundled_crd_spec(name)))


def _storage_version_only(spec: dict | None) -> dict | None:
    """The bundle's CRD with its storage version alone (ray.io/v1, what the stack creates): the deprecated
    v1alpha1 schema doubles the ~1 MB state every mocked program run would serialize, and nothing reads it."""
    if spec is None:
        return None
    return {**spec, "versions": [v for v in spec.get("versions", []) if v.get("storage")]}


def _underscored_extensions(value: Any) -> Any:
    """The provider checkpoints a live CRD with its `x-kubernetes-*` keys as `x_kubernetes_*` (pulumi-kubernetes
    provider/pkg/provider/provider.go), the names the SDK's output types know."""
    if isinstance(value, dict):
        return {(k.replace("-", "_") if k.startswith("x-kubernetes-") else k): _underscored_extensions(v)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_underscored_extensions(item) for item in value]
    return value
# What `get_engine_versions` answers under mocks (wire keys, camelCase). An assumption, not a fact about any
# location today: the per-channel defaults of GKE's release notes ("Default patch version for cluster creation",
# https://cloud.google.com/kubernetes-engine/docs/release-notes) as last seen in a public copy of that page.
# A real `pulumi up` asks GKE and refuses what the location does not offer.
OFFERED_GKE_VERSIONS = {
    "defaultClusterVersion": "1.35.5-gke.1163012",
    "releaseChannelDefaultVersion": {"RAPID": "1.36.0-gke.3302004", "REGULAR": "1.35.5-gke.1163012",
                                     "STABLE": "1.34.8-gke.1000000", "EXTENDED": "1.35.5-gke.1163012"},
    "validMasterVersions": ["1.36.0-gke.3302004", "1.35.5-gke.1163012", "1.35.2-gke.1842000",
                            "1.34.8-gke.1000000", "1.34.1-gke.1829001", "1.33.5-gke.2228001"],
    "latestMasterVersion": "1.36.0-gke.3302004",
    "releaseChannelLatestVersion": {"RAPID": "1.36.0-gke.3302004", "REGULAR": "1.35.5-gke.1163012",
                                    "STABLE": "1.34.8-gke.1000000", "EXTENDED": "1.35.5-gke.1163012"},
}


@dataclass
class Registration:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str
    inputs: dict
    dependencies: list[str]
    property_dependencies: dict[str, list[str]]
    provider: str
    protect: bool
    retain_on_delete: bool
    deleted_with: str
    ignore_changes: list[str]
    delete_before_replace: bool = False
    import_id: str = ""


class RecordingMonitor(pulumi_mocks.MockMonitor):
    """Keeps the graph facts the stock monitor drops: parent, dependencies, provider, options."""

    def __init__(self, mocks: pulumi.runtime.Mocks):
        super().__init__(mocks)
        self.registrations: list[Registration] = []
        self.stack_outputs: dict[str, Any] = {}
        self.secret_stack_outputs: set[str] = set()
        self.reads: dict[str, list[str]] = {}   # URN of a read resource -> URNs it waited for

    def RegisterResourceOutputs(self, request):  # noqa: N802 (gRPC method name)
        # Only the root stack's outputs are the program's exports.
        if "::pulumi:pulumi:Stack::" in request.urn:
            for key in request.outputs.fields:
                value, secret = rpc.deserialize_properties_unwrap_secrets(
                    struct_pb2.Struct(fields={"v": request.outputs.fields[key]}))
                self.stack_outputs[key] = value["v"]
                if secret:
                    self.secret_stack_outputs.add(key)
        return super().RegisterResourceOutputs(request)

    def ReadResource(self, request):  # noqa: N802 (gRPC method name)
        # A resource the program reads (`Resource.get`): kept apart, with what the read waits for.
        response = super().ReadResource(request)
        self.reads[response.urn] = list(request.dependencies)
        return response

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.registrations.append(Registration(
                urn=response.urn,
                type=request.type,
                name=request.name,
                custom=bool(request.custom),
                parent=request.parent,
                inputs=rpc.deserialize_properties(request.object),
                dependencies=list(request.dependencies),
                property_dependencies={key: list(value.urns) for key, value in request.propertyDependencies.items()},
                provider=request.provider,
                protect=bool(request.protect),
                retain_on_delete=bool(request.retainOnDelete),
                deleted_with=request.deletedWith,
                ignore_changes=list(request.ignoreChanges),
                delete_before_replace=bool(request.deleteBeforeReplace),
                import_id=request.importId,
            ))
        return response


@dataclass
class ProgramRun:
    resources: list[Registration]
    outputs: dict[str, Any]
    secret_outputs: set[str] = field(default_factory=set)
    # The stacks a run stack's StackReference read, as their programs ran under mocks (fully qualified name).
    referenced: dict[str, "ProgramRun"] = field(default_factory=dict)

    def of_type(self, token: str) -> list[Registration]:
        return [r for r in self.resources if r.type == token]

    def one(self, token: str, name: str | None = None) -> Registration:
        matches = [r for r in self.of_type(token) if name is None or r.name == name]
        if len(matches) != 1:
            raise LookupError(f"expected one {token} {name or ''}, found {[r.name for r in matches]}")
        return matches[0]

    def by_urn(self, urn: str) -> Registration:
        return next(r for r in self.resources if r.urn == urn)


def to_pulumi_config(raw: dict[str, Any]) -> dict[str, str]:
    """Config values as the engine hands them to a program: strings, structured values as JSON."""
    def text(value: Any) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (list, dict)):
            return json.dumps(value)
        return str(value)
    return {f"{NAMESPACE}:{key}": text(value) for key, value in raw.items()}


def run_program(raw_config: dict[str, Any], stack: str = "test",
                program: Path = PROJECT_ROOT / "__main__.py", monitor: RecordingMonitor | None = None,
                compile_step=None) -> ProgramRun:
    """Run the program once under mocks. Raises what the program raises (e.g. pulumi.RunError); pass
    your own `monitor` to inspect what was registered before a failure. `compile_step`: what the program's config
    build compiles with (workloads/compile_check.py for_program); None: it reads kept verdicts only, as the offline
    plan compiles on its own. A run stack's cluster stack is run first (play_cluster_stack)."""
    play_cluster_stack(raw_config, program)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        settings.ROOT.set(None)
        set_all_config(to_pulumi_config(raw_config))
        monitor = monitor or RecordingMonitor(GcpMocks())
        pulumi.runtime.set_mocks(monitor.mocks, project=NAMESPACE, stack=stack, preview=False, monitor=monitor,
                                 logger=PROGRAM_LOG)
        settings.ROOT.set(None)  # set_mocks made a throw-away root; run_in_stack makes the real one
        # The data look-ups' objects.list requests go to the played Cloud Storage, never to the network.
        data_lookups.storage_get = play_objects_list
        compile_check.for_program = compile_step
        loop.run_until_complete(run_in_stack(lambda: runpy.run_path(str(program), run_name="__main__")))
        reference = raw_config.get("clusterStack")
        return ProgramRun(resources=monitor.registrations, outputs=monitor.stack_outputs,
                          secret_outputs=monitor.secret_stack_outputs,
                          referenced={reference: CLUSTER_RUNS[reference]}
                          if isinstance(reference, str) and reference in CLUSTER_RUNS else {})
    finally:
        data_lookups.storage_get = real_storage_get
        compile_check.for_program = compile_check.compile_step
        # A run that failed half-way (an apply raising RunError) leaves output tasks of this loop in Pulumi's
        # process-wide settings; the next run would wait on them after this loop is closed.
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        with settings.SETTINGS.lock:
            settings.SETTINGS.outputs.clear()
        settings.ROOT.set(None)
        asyncio.set_event_loop(None)
        loop.close()

