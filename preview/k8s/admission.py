"""What the JobSet and KubeRay controllers refuse beyond their CRDs' schemas and CEL rules, played offline.

A JobSet the webhook refuses fails `pulumi up` at create; a RayJob or RayCluster KubeRay refuses is accepted by the
API server and then sits in ValidationFailed (KubeRay v1.7.0 rayjob_controller.go calls ValidateRayJobMetadata and
ValidateRayJobSpec at the top of every reconcile, raycluster_controller.go ValidateRayClusterMetadata and
ValidateRayClusterSpec): in both cases the run never starts, and no schema check sees it, because these rules are Go
code, not schema. Each rule below is one check of that code at the version the stack installs, with the file, the
function and the line it plays, so a rule the next object breaks is refused in the plan, before `up`.

Sources (read at the tags the stack pins, infra/versions.py):
- kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook.go: `Default` (the mutating webhook, run first),
  `ValidateCreate`, `validateFailurePolicy`, `validateCoordinator`, `validateCoordinatorLabelValue`;
  pkg/util/placement/placement.go GenJobName/GenPodName; pkg/controllers/jobset_controller.go CoordinatorEndpoint,
  GetSubdomain; pkg/features/features.go (InPlaceRestart and RestartJob off by default; the stack sets no gate).
- ray-project/kuberay v1.7.0 ray-operator/controllers/ray/utils/validation.go: ValidateRayClusterMetadata,
  ValidateRayClusterSpec, ValidateRayJobMetadata, ValidateRayJobSpec, validateDeletionConfiguration,
  validateWorkerGroupIdleTimeout, validateWorkerGroupPriority; utils/constant.go (MaxRayClusterNameLength 53,
  MaxRayJobNameLength 47); pkg/features/features.go (RayJobDeletionPolicy on; network policy, mTLS, history server,
  embedded GCS storage off by default).
The runtimeEnvYAML/ttl/rayClusterSpec-xor-clusterSelector rules were checked by preview/k8s/rules.py before this
module; they stay there and are not repeated here.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from preview.k8s.findings import Finding, field_path
from preview.k8s.manifests import kind_of, object_ref

JOBSET_SOURCE = "kubernetes-sigs/jobset v0.12.0 pkg/webhooks/jobset_webhook.go"
KUBERAY_SOURCE = "ray-project/kuberay v1.7.0 ray-operator/controllers/ray/utils/validation.go"

# k8s.io/apimachinery/pkg/util/validation: IsDNS1035Label, IsDNS1123Subdomain, IsValidLabelValue.
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
MAX_INT32 = 2**31 - 1

# jobset_webhook.go L416-418 (minRuleNameLength, maxRuleNameLength, ruleNameFmt).
RULE_NAME = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
RULE_NAME_MAX = 128
# jobset_webhook.go L85-91 validOnJobFailureReasons (batch/v1 JobReason* constants).
JOB_FAILURE_REASONS = ("BackoffLimitExceeded", "DeadlineExceeded", "FailedIndexes", "MaxFailedIndexesExceeded",
                       "PodFailurePolicy")
# jobset_webhook.go L76 maxReplicasPerReplicatedJob.
MAX_REPLICAS_WITH_RESTART_JOB = 1024
# jobset_webhook.go L248: the 5 random characters the Job controller appends to a pod's name.
POD_SUFFIX = "-abcde"

Problem = tuple[tuple, str]          # (field path parts, message)


@dataclass(frozen=True)
class AdmissionRule:
    """One refusal of a controller's own code: which kind it applies to, where the code is, and the check."""

    kind: str
    source: str                 # repository, tag, file and line
    function: str               # the Go function the rule plays
    what: str                   # the rule in words
    check: Callable[[Mapping[str, Any]], Iterator[Problem]]


def _as_int(value: Any, default: int | None = None) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _dns1035_problems(value: str) -> list[str]:
    problems = []
    if len(value) > LABEL_MAX:
        problems.append(f"must be no more than {LABEL_MAX} characters")
    if not DNS1035_LABEL.match(value):
        problems.append("must be a DNS-1035 label (lowercase letters, digits, '-'; starts with a letter)")
    return problems


def _label_value_problems(value: str) -> list[str]:
    problems = []
    if len(value) > LABEL_MAX:
        problems.append(f"must be no more than {LABEL_MAX} characters")
    if not LABEL_VALUE.match(value):
        problems.append("must be a valid label value")
    return problems


# ---- JobSet: the object as the webhook sees it (after the mutating webhook's defaults) --------------------

def _defaulted_jobset(obj: Mapping[str, Any]) -> dict:
    """The defaults jobset_webhook.go `Default` (L111-160) applies before validation, on a copy: completionMode
    Indexed (L121), failure-policy rule names failurePolicyRule<i> when empty (L142-148)."""
    import copy
    js = copy.deepcopy(dict(obj))
    spec = js.setdefault("spec", {})
    for rjob in spec.get("replicatedJobs") or []:
        job = ((rjob.get("template") or {}).setdefault("spec", {}))
        job.setdefault("completionMode", "Indexed")
        rjob.setdefault("groupName", "default")       # the CRD's default (jobset.x-k8s.io_jobsets.yaml)
    for index, rule in enumerate((spec.get("failurePolicy") or {}).get("rules") or []):
        if not rule.get("name"):
            rule["name"] = f"failurePolicyRule{index}"
    return js


def _rjobs(js: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((js.get("spec") or {}).get("replicatedJobs") or [])


def _rjob_names(js: Mapping[str, Any]) -> set[str]:
    return {str(r.get("name")) for r in _rjobs(js)}


def _js_name(js: Mapping[str, Any]) -> str:
    return str((js.get("metadata") or {}).get("name", ""))


def _subdomain(js: Mapping[str, Any]) -> str:
    # pkg/controllers/jobset_controller.go GetSubdomain (L1090): network.subdomain, else the JobSet's name.
    return str(((js.get("spec") or {}).get("network") or {}).get("subdomain") or _js_name(js))


def _failure_rules(js: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list(((js.get("spec") or {}).get("failurePolicy") or {}).get("rules") or [])


RULES_PATH = ("spec", "failurePolicy", "rules")


def _js_in_place_restart(js):
    policy = (js.get("spec") or {}).get("failurePolicy") or {}
    if policy.get("restartStrategy") == "InPlaceRestart":
        yield ("spec", "failurePolicy", "restartStrategy"), \
            "InPlaceRestart needs the InPlaceRestart feature gate, which is off by default (the stack sets none)"


def _js_depends_on_first(js):
    rjobs = _rjobs(js)
    if rjobs and rjobs[0].get("dependsOn"):
        yield ("spec", "replicatedJobs", 0, "dependsOn"), "dependsOn can't be set for the first ReplicatedJob"


def _js_subdomain(js):
    subdomain = ((js.get("spec") or {}).get("network") or {}).get("subdomain")
    if subdomain:
        problems = _dns1035_problems(subdomain)
        if len(subdomain) > DNS1123_SUBDOMAIN_MAX or not DNS1123_SUBDOMAIN.match(subdomain):
            problems.append("must be a DNS-1123 subdomain")
        for problem in problems:
            yield ("spec", "network", "subdomain"), f"{subdomain!r} {problem}"


def _js_managed_by(js):
    manager = (js.get("spec") or {}).get("managedBy")
    if manager is not None:
        prefix, _, path = str(manager).partition("/")
        if not path or not DNS1123_SUBDOMAIN.match(prefix):
            yield ("spec", "managedBy"), f"{manager!r} must be a domain-prefixed path (e.g. 'example.com/name')"
        if len(str(manager)) > LABEL_MAX:
            yield ("spec", "managedBy"), f"{manager!r} must be no more than {LABEL_MAX} characters"


def _js_replicas_times_parallelism(js):
    for i, rjob in enumerate(_rjobs(js)):
        job = (rjob.get("template") or {}).get("spec") or {}
        if _as_int(job.get("parallelism"), 1) * _as_int(rjob.get("replicas"), 1) > MAX_INT32:
            yield ("spec", "replicatedJobs", i), f"replicas x parallelism of {rjob.get('name')!r} exceeds {MAX_INT32}"


def _js_group_name(js):
    for i, rjob in enumerate(_rjobs(js)):
        for problem in _dns1035_problems(str(rjob.get("groupName", "default"))):
            yield ("spec", "replicatedJobs", i, "groupName"), problem


def _js_job_names(js):
    # placement.GenJobName: <jobset>-<replicatedJob>-<index>; the webhook checks the last (longest) index.
    for i, rjob in enumerate(_rjobs(js)):
        longest = f"{_js_name(js)}-{rjob.get('name')}-{_as_int(rjob.get('replicas'), 1) - 1}"
        for problem in _dns1035_problems(longest):
            yield ("spec", "replicatedJobs", i, "name"), f"child Job name {longest!r} {problem}"


def _js_pod_names(js):
    # placement.GenPodName: <jobset>-<replicatedJob>-<job index>-<pod index>, plus the Job controller's 5-character
    # suffix; checked for Indexed Jobs with completions set.
    for i, rjob in enumerate(_rjobs(js)):
        job = (rjob.get("template") or {}).get("spec") or {}
        completions = _as_int(job.get("completions"))
        if job.get("completionMode") != "Indexed" or completions is None:
            continue
        longest = (f"{_js_name(js)}-{rjob.get('name')}-{_as_int(rjob.get('replicas'), 1) - 1}-{completions - 1}"
                   f"{POD_SUFFIX}")
        for problem in _dns1035_problems(longest):
            yield ("spec", "replicatedJobs", i, "name"), f"pod name {longest!r} {problem}"


def _js_depends_on_previous(js):
    seen: set[str] = set()
    for i, rjob in enumerate(_rjobs(js)):
        seen.add(str(rjob.get("name")))
        for d, dependency in enumerate(rjob.get("dependsOn") or []):
            if dependency.get("name") not in seen:
                yield ("spec", "replicatedJobs", i, "dependsOn", d, "name"), \
                    f"replicatedJob {rjob.get('name')!r} cannot depend on {dependency.get('name')!r}"


def _js_success_targets(js):
    names = _rjob_names(js)
    targets = ((js.get("spec") or {}).get("successPolicy") or {}).get("targetReplicatedJobs") or []
    for t, target in enumerate(targets):
        if target not in names:
            yield ("spec", "successPolicy", "targetReplicatedJobs", t), \
                f"replicatedJob {target!r} does not appear in spec.replicatedJobs"


def _js_restart_job_gate(js):
    for r, rule in enumerate(_failure_rules(js)):
        if rule.get("action") in ("RestartJob", "RestartJobAndIgnoreMaxRestarts"):
            yield RULES_PATH + (r, "action"), \
                f"{rule['action']} needs the RestartJob feature gate, which is off by default (the stack sets none)"


def _js_rule_name_length(js):
    for r, rule in enumerate(_failure_rules(js)):
        name = str(rule.get("name", ""))
        if not 1 <= len(name) <= RULE_NAME_MAX:
            yield RULES_PATH + (r, "name"), f"rule name of length {len(name)}: must be 1 to {RULE_NAME_MAX} characters"


def _js_rule_name_format(js):
    for r, rule in enumerate(_failure_rules(js)):
        name = str(rule.get("name", ""))
        if not RULE_NAME.match(name):
            yield RULES_PATH + (r, "name"), \
                (f"rule name {name!r} must match {RULE_NAME.pattern} (a letter, then letters, digits, '_', ',' or "
                 "':', ending in a letter, digit or '_')")


def _js_rule_names_unique(js):
    seen: dict[str, int] = {}
    for r, rule in enumerate(_failure_rules(js)):
        name = str(rule.get("name", ""))
        if name in seen:
            yield RULES_PATH + (r, "name"), f"rule name {name!r} is also the name of rule {seen[name]}"
        seen.setdefault(name, r)


def _js_rule_targets(js):
    names = _rjob_names(js)
    for r, rule in enumerate(_failure_rules(js)):
        for t, target in enumerate(rule.get("targetReplicatedJobs") or []):
            if target not in names:
                yield RULES_PATH + (r, "targetReplicatedJobs", t), \
                    f"replicatedJob {target!r} does not appear in spec.replicatedJobs"


def _js_rule_reasons(js):
    for r, rule in enumerate(_failure_rules(js)):
        for f, reason in enumerate(rule.get("onJobFailureReasons") or []):
            if reason not in JOB_FAILURE_REASONS:
                yield RULES_PATH + (r, "onJobFailureReasons", f), \
                    f"{reason!r} is not a Job failure reason ({', '.join(JOB_FAILURE_REASONS)})"


def _js_restart_job_replicas(js):
    if any(rule.get("action") in ("RestartJob", "RestartJobAndIgnoreMaxRestarts") for rule in _failure_rules(js)):
        for i, rjob in enumerate(_rjobs(js)):
            if _as_int(rjob.get("replicas"), 1) > MAX_REPLICAS_WITH_RESTART_JOB:
                yield ("spec", "replicatedJobs", i, "replicas"), \
                    f"more than {MAX_REPLICAS_WITH_RESTART_JOB} replicas with a RestartJob rule"


def _js_coordinator(js):
    coordinator = (js.get("spec") or {}).get("coordinator")
    if coordinator is None:
        return
    path = ("spec", "coordinator")
    target = next((r for r in _rjobs(js) if r.get("name") == coordinator.get("replicatedJob")), None)
    if target is None:
        yield path + ("replicatedJob",), f"replicatedJob {coordinator.get('replicatedJob')!r} does not exist"
        return
    job = (target.get("template") or {}).get("spec") or {}
    if not 0 <= _as_int(coordinator.get("jobIndex"), 0) < _as_int(target.get("replicas"), 1):
        yield path + ("jobIndex",), f"job index {coordinator.get('jobIndex')} is not below replicas"
    completions = _as_int(job.get("completions"))
    if job.get("completionMode") != "Indexed" or completions is None:
        yield path, "the coordinator's Job must be Indexed with completions set"
    elif not 0 <= _as_int(coordinator.get("podIndex"), 0) < completions:
        yield path + ("podIndex",), f"pod index {coordinator.get('podIndex')} is not below completions"


def _js_coordinator_label(js):
    coordinator = (js.get("spec") or {}).get("coordinator")
    if coordinator is None:
        return
    # pkg/controllers/jobset_controller.go CoordinatorEndpoint: <jobset>-<rjob>-<job>-<pod>.<subdomain>, the value
    # of the jobset.sigs.k8s.io/coordinator label on every pod.
    endpoint = (f"{_js_name(js)}-{coordinator.get('replicatedJob')}-{_as_int(coordinator.get('jobIndex'), 0)}-"
                f"{_as_int(coordinator.get('podIndex'), 0)}.{_subdomain(js)}")
    for problem in _label_value_problems(endpoint):
        yield ("metadata", "name"), f"coordinator label value {endpoint!r} ({len(endpoint)} characters) {problem}"


def _jobset(line: int, function: str, what: str, check) -> AdmissionRule:
    return AdmissionRule("JobSet", f"{JOBSET_SOURCE}:{line}", function, what, check)


JOBSET_RULES: tuple[AdmissionRule, ...] = (
    _jobset(172, "ValidateCreate", "restartStrategy InPlaceRestart needs its feature gate", _js_in_place_restart),
    _jobset(178, "ValidateCreate", "the first replicatedJob has no dependsOn", _js_depends_on_first),
    _jobset(186, "ValidateCreate", "network.subdomain is a DNS-1123 subdomain and a DNS-1035 label", _js_subdomain),
    _jobset(204, "ValidateCreate", "managedBy is a domain-prefixed path of at most 63 characters", _js_managed_by),
    _jobset(223, "ValidateCreate", "replicas x parallelism fits an int32", _js_replicas_times_parallelism),
    _jobset(228, "ValidateCreate", "groupName is a DNS-1035 label", _js_group_name),
    _jobset(237, "ValidateCreate", "child Job names are DNS-1035 labels (63)", _js_job_names),
    _jobset(250, "ValidateCreate", "pod names are DNS-1035 labels (63)", _js_pod_names),
    _jobset(259, "ValidateCreate", "dependsOn names an earlier replicatedJob", _js_depends_on_previous),
    _jobset(285, "ValidateCreate", "successPolicy targets exist", _js_success_targets),
    _jobset(441, "validateFailurePolicy", "RestartJob actions need their feature gate", _js_restart_job_gate),
    _jobset(446, "validateFailurePolicy", "RestartJob rules allow at most 1024 replicas", _js_restart_job_replicas),
    _jobset(458, "validateFailurePolicy", "rule names are 1 to 128 characters", _js_rule_name_length),
    _jobset(465, "validateFailurePolicy", f"rule names match {RULE_NAME.pattern}", _js_rule_name_format),
    _jobset(471, "validateFailurePolicy", "rule targetReplicatedJobs exist", _js_rule_targets),
    _jobset(478, "validateFailurePolicy", "onJobFailureReasons are Job failure reasons", _js_rule_reasons),
    _jobset(486, "validateFailurePolicy", "rule names are unique", _js_rule_names_unique),
    _jobset(500, "validateCoordinator", "the coordinator names an existing indexed pod", _js_coordinator),
    _jobset(527, "validateCoordinatorLabelValue", "the coordinator endpoint is a label value (63)",
            _js_coordinator_label),
)


# ---- KubeRay: RayCluster specs (also a RayJob's rayClusterSpec) ---------------------------------------------

def _env_names(container: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(e.get("name")): str(e.get("value", "")) for e in (container or {}).get("env") or []}


def _head_container(spec: Mapping[str, Any]) -> Mapping[str, Any] | None:
    # utils/constant.go RayContainerIndex = 0: the Ray container is the first.
    containers = (((spec.get("headGroupSpec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return containers[0] if containers else None


def _autoscaling(spec: Mapping[str, Any]) -> bool:
    return bool(spec.get("enableInTreeAutoscaling"))      # utils/util.go IsAutoscalingEnabled


def _autoscaler_v2(spec: Mapping[str, Any]) -> bool:
    return ((spec.get("autoscalerOptions") or {}).get("version")) == "v2"   # util.go IsAutoscalingV2Enabled


def _env_v2(spec: Mapping[str, Any]) -> bool:
    return _env_names(_head_container(spec)).get("RAY_enable_autoscaler_v2") in ("1", "true")


def _groups(spec: Mapping[str, Any]) -> list[tuple[int, Mapping[str, Any]]]:
    return list(enumerate(spec.get("workerGroupSpecs") or []))


def _version(text: str) -> tuple[int, ...] | None:
    match = re.match(r"^v?(\d+)\.(\d+)(?:\.(\d+))?", str(text or ""))
    return tuple(int(part or 0) for part in match.groups()) if match else None


def _rc_head_container(spec, _annotations):
    if _head_container(spec) is None:
        yield ("headGroupSpec", "template", "spec", "containers"), "headGroupSpec should have at least one container"


def _rc_group_resources(spec, _annotations):
    groups = [(("headGroupSpec",), spec.get("headGroupSpec") or {})] + \
        [(("workerGroupSpecs", i), g) for i, g in _groups(spec)]
    for path, group in groups:
        params = group.get("rayStartParams") or {}
        if any(params.get(key) for key in ("num-cpus", "num-gpus", "memory", "resources")) and group.get("resources"):
            yield path + ("resources",), "resources set in both rayStartParams and resources; use only one"
        if "labels" in params:
            yield path + ("rayStartParams", "labels"), "rayStartParams['labels'] is not supported; use labels"
        for key, value in (group.get("labels") or {}).items():
            if not re.match(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$", key):
                yield path + ("labels", key), "invalid label key"
            for problem in _label_value_problems(str(value)):
                yield path + ("labels", key), f"label value {value!r} {problem}"


def _rc_worker_containers(spec, _annotations):
    for i, group in _groups(spec):
        if not (((group.get("template") or {}).get("spec") or {}).get("containers")):
            yield ("workerGroupSpecs", i, "template", "spec", "containers"), \
                "workerGroupSpec should have at least one container"


def _rc_replica_bounds(spec, _annotations):
    for i, group in _groups(spec):
        path = ("workerGroupSpecs", i)
        # The CRD defaults both (minReplicas 0, maxReplicas 2147483647) before the controller reads the object, so
        # "must both be set" only bites an explicit null; the ordering rules see the defaults.
        low, high = _as_int(group.get("minReplicas", 0)), _as_int(group.get("maxReplicas", MAX_INT32))
        if not _autoscaling(spec) and (low is None or high is None):
            yield path, "minReplicas and maxReplicas must both be set when autoscaling is disabled"
        if low is not None and low < 0:
            yield path + ("minReplicas",), f"negative minReplicas {low}"
        if high is not None and high < 0:
            yield path + ("maxReplicas",), f"negative maxReplicas {high}"
        if low is not None and high is not None and low > high:
            yield path + ("minReplicas",), f"minReplicas {low} greater than maxReplicas {high}"


def _rc_idle_timeout(spec, _annotations):
    for i, group in _groups(spec):
        timeout = _as_int(group.get("idleTimeoutSeconds"))
        if timeout is None:
            continue
        if timeout < 0:
            yield ("workerGroupSpecs", i, "idleTimeoutSeconds"), f"must be non-negative, got {timeout}"
        elif not (_autoscaler_v2(spec) or _env_v2(spec)):
            yield ("workerGroupSpecs", i, "idleTimeoutSeconds"), "is set, but autoscaler v2 is not enabled"


def _rc_priority(spec, _annotations):
    for i, group in _groups(spec):
        if not _as_int(group.get("priority"), 0):
            continue
        version = _version(spec.get("rayVersion"))
        if version is None or version < (2, 56, 0):
            yield ("workerGroupSpecs", i, "priority"), "needs rayVersion 2.56.0 or later"
        elif not (_autoscaler_v2(spec) or _env_v2(spec)):
            yield ("workerGroupSpecs", i, "priority"), "is only supported with autoscaler v2"


def _rc_gcs_fault_tolerance(spec, annotations):
    options = spec.get("gcsFaultToleranceOptions")
    env = _env_names(_head_container(spec))
    if annotations.get("ray.io/ft-enabled") and options is not None:
        yield ("gcsFaultToleranceOptions",), "ray.io/ft-enabled annotation and gcsFaultToleranceOptions both set"
    enabled = str(annotations.get("ray.io/ft-enabled", "")).lower() == "true" or options is not None
    if not enabled and "RAY_REDIS_ADDRESS" in env:
        yield ("headGroupSpec",), "RAY_REDIS_ADDRESS is set but gcsFaultToleranceOptions is not"
    if options is not None:
        params = (spec.get("headGroupSpec") or {}).get("rayStartParams") or {}
        if params.get("redis-password") or "REDIS_PASSWORD" in env or "RAY_REDIS_ADDRESS" in env:
            yield ("headGroupSpec",), "redis password/address set outside gcsFaultToleranceOptions"
        if annotations.get("ray.io/external-storage-namespace"):
            yield ("gcsFaultToleranceOptions",), "ray.io/external-storage-namespace annotation with the options set"
    if ((spec.get("headGroupSpec") or {}).get("rayStartParams") or {}).get("redis-username") \
            or "REDIS_USERNAME" in env:
        yield ("headGroupSpec",), "redis username outside gcsFaultToleranceOptions"


def _rc_autoscaler(spec, _annotations):
    env = _env_names(_head_container(spec))
    if not _autoscaling(spec) and env.get("RAY_enable_autoscaler_v2") in ("1", "true"):
        yield ("headGroupSpec",), "RAY_enable_autoscaler_v2 is on but enableInTreeAutoscaling is not"
    if _autoscaling(spec):
        for i, group in _groups(spec):
            if group.get("suspend"):
                yield ("workerGroupSpecs", i, "suspend"), "a worker group cannot be suspended with the autoscaler"
        if (spec.get("autoscalerOptions") or {}).get("version") and "RAY_enable_autoscaler_v2" in env:
            yield ("autoscalerOptions", "version"), "both autoscalerOptions.version and RAY_enable_autoscaler_v2 set"
        if _autoscaler_v2(spec):
            pods = [(("headGroupSpec",), spec.get("headGroupSpec") or {})] + \
                [(("workerGroupSpecs", i), g) for i, g in _groups(spec)]
            for path, group in pods:
                policy = ((group.get("template") or {}).get("spec") or {}).get("restartPolicy")
                if policy not in (None, "", "Never"):
                    yield path + ("template", "spec", "restartPolicy"), "must be Never or unset with autoscaler v2"
    options = spec.get("autoscalerOptions") or {}
    if _as_int(options.get("idleTimeoutSeconds"), 0) < 0:
        yield ("autoscalerOptions", "idleTimeoutSeconds"), "must be non-negative"
    if "KUBERAY_GEN_AUTOSCALER_START_CMD" in _env_names(options):
        yield ("autoscalerOptions", "env"), "must not set KUBERAY_GEN_AUTOSCALER_START_CMD (KubeRay manages it)"


def _rc_auth(spec, _annotations):
    auth = spec.get("authOptions") or {}
    k8s_auth = bool(auth.get("enableK8sTokenAuth"))
    if auth.get("mode") == "token":
        version = _version(spec.get("rayVersion"))
        if version is None or version < (2, 52, 0):
            yield ("rayVersion",), "authOptions.mode token needs rayVersion 2.52.0 or later"
        elif k8s_auth and version < (2, 55, 0):
            yield ("rayVersion",), "enableK8sTokenAuth needs rayVersion 2.55.0 or later"
        if k8s_auth and auth.get("secretName"):
            yield ("authOptions",), "enableK8sTokenAuth and secretName are both set"
    elif k8s_auth:
        yield ("authOptions",), "enableK8sTokenAuth needs authOptions.mode token"


def _rc_gated_fields(spec, _annotations):
    # Fields whose feature gates are off by default in v1.7.0 (pkg/features/features.go); the stack sets no gate.
    for key, gate in (("historyServerOptions", "RayClusterHistoryServer"), ("networkPolicy", "RayClusterNetworkPolicy"),
                      ("tlsOptions", "RayClusterMTLS")):
        if spec.get(key) is not None:
            yield (key,), f"needs the {gate} feature gate, off by default"
    if (spec.get("gcsFaultToleranceOptions") or {}).get("backend") == "rocksdb":
        yield ("gcsFaultToleranceOptions", "backend"), "rocksdb needs the GCSFaultToleranceEmbeddedStorage gate"


def _kuberay(line: int, function: str, what: str, check) -> AdmissionRule:
    return AdmissionRule("RayClusterSpec", f"{KUBERAY_SOURCE}:{line}", function, what, check)


RAY_CLUSTER_SPEC_RULES: tuple[AdmissionRule, ...] = (
    _kuberay(104, "ValidateRayClusterSpec", "the head has a container", _rc_head_container),
    _kuberay(108, "validateRayGroupResources/Labels", "resources in one place; labels valid", _rc_group_resources),
    _kuberay(119, "ValidateRayClusterSpec", "every worker group has a container", _rc_worker_containers),
    _kuberay(125, "ValidateRayClusterSpec", "min/max replicas set and ordered", _rc_replica_bounds),
    _kuberay(1006, "validateWorkerGroupIdleTimeout", "idleTimeoutSeconds only with autoscaler v2", _rc_idle_timeout),
    _kuberay(1113, "validateWorkerGroupPriority", "priority needs Ray 2.56 and autoscaler v2", _rc_priority),
    _kuberay(153, "ValidateRayClusterSpec", "GCS fault tolerance configured in one place", _rc_gcs_fault_tolerance),
    _kuberay(206, "ValidateRayClusterSpec", "autoscaler settings consistent", _rc_autoscaler),
    _kuberay(284, "ValidateRayClusterSpec", "token auth needs a recent enough rayVersion", _rc_auth),
    _kuberay(260, "ValidateRayClusterSpec", "gated fields need their feature gates", _rc_gated_fields),
)


# ---- KubeRay: RayJob spec --------------------------------------------------------------------------------

def _rj_suspend(job):
    spec = job.get("spec") or {}
    if spec.get("suspend") and not spec.get("shutdownAfterJobFinishes"):
        yield ("spec", "suspend"), "a RayJob without shutdownAfterJobFinishes cannot be suspended"
    if spec.get("suspend") and spec.get("clusterSelector"):
        yield ("spec", "suspend"), "the clusterSelector mode does not support suspend"


def _rj_ttl(job):
    if _as_int((job.get("spec") or {}).get("ttlSecondsAfterFinished"), 0) < 0:
        yield ("spec", "ttlSecondsAfterFinished"), "must be non-negative"


def _rj_deletion_strategy(job):
    spec = job.get("spec") or {}
    strategy = spec.get("deletionStrategy")
    if strategy is None:
        return
    rules = strategy.get("deletionRules") or []
    legacy = strategy.get("onSuccess") is not None or strategy.get("onFailure") is not None
    if rules and spec.get("shutdownAfterJobFinishes"):
        yield ("spec", "deletionStrategy"), "deletionRules and shutdownAfterJobFinishes are mutually exclusive"
    if rules and legacy:
        yield ("spec", "deletionStrategy"), "deletionRules and onSuccess/onFailure are mutually exclusive"
    if not rules and not legacy:
        yield ("spec", "deletionStrategy"), "needs onSuccess and onFailure, or deletionRules"


def _rj_cluster_selector(job):
    spec = job.get("spec") or {}
    selector = spec.get("clusterSelector")
    if not selector:
        return
    if not selector.get("ray.io/cluster"):
        yield ("spec", "clusterSelector"), "the cluster name (ray.io/cluster) must not be empty"
    if spec.get("submissionMode") == "SidecarMode":
        yield ("spec", "submissionMode"), "clusterSelector is not supported in SidecarMode"
    if _as_int(spec.get("backoffLimit"), 0) > 0:
        yield ("spec", "backoffLimit"), "backoffLimit is incompatible with clusterSelector"


def _rj_modes(job):
    spec = job.get("spec") or {}
    mode = spec.get("submissionMode")
    if mode == "InteractiveMode" and _as_int(spec.get("backoffLimit"), 0) > 0:
        yield ("spec", "backoffLimit"), "backoffLimit is incompatible with InteractiveMode"
    if mode == "SidecarMode":
        for key in ("submitterPodTemplate", "submitterConfig"):
            if spec.get(key) is not None:
                yield ("spec", key), f"SidecarMode does not support {key}"
        head = ((((spec.get("rayClusterSpec") or {}).get("headGroupSpec") or {}).get("template") or {})
                .get("spec") or {})
        if head.get("restartPolicy") not in (None, "", "Never"):
            yield ("spec", "rayClusterSpec", "headGroupSpec", "template", "spec", "restartPolicy"), \
                "must be Never or unset in SidecarMode"


def _rj_k8s_auth(job):
    if (((job.get("spec") or {}).get("rayClusterSpec") or {}).get("authOptions") or {}).get("enableK8sTokenAuth"):
        yield ("spec", "rayClusterSpec", "authOptions"), "K8s token auth is not supported for RayJob"


def _rj_deadlines(job):
    spec = job.get("spec") or {}
    for key in ("activeDeadlineSeconds", "preRunningDeadlineSeconds"):
        if key in spec and _as_int(spec[key], 0) <= 0:
            yield ("spec", key), "must be a positive integer"
    if "backoffLimit" in spec and _as_int(spec["backoffLimit"], 0) < 0:
        yield ("spec", "backoffLimit"), "must not be negative"


def _name_rule(kind: str, limit: int):
    def check(obj):
        name = str((obj.get("metadata") or {}).get("name", ""))
        if len(name) > limit:
            yield ("metadata", "name"), f"{kind} name {name!r} is longer than {limit} characters"
        if not DNS1035_LABEL.match(name):
            yield ("metadata", "name"), f"{kind} name {name!r} is not a DNS-1035 label"
    return check


# utils/constant.go: MaxRayClusterNameLength = 53, MaxRayJobNameLength = 53 - 6 (KubeRay derives pod, service and
# submitter Job names from them).
RAY_CLUSTER_METADATA_RULE = AdmissionRule("RayCluster", f"{KUBERAY_SOURCE}:33", "ValidateRayClusterMetadata",
                                          "the name is a DNS-1035 label of at most 53 characters",
                                          _name_rule("RayCluster", 53))
RAY_JOB_METADATA_RULE = AdmissionRule("RayJob", f"{KUBERAY_SOURCE}:534", "ValidateRayJobMetadata",
                                      "the name is a DNS-1035 label of at most 47 characters",
                                      _name_rule("RayJob", 47))


def _rayjob(line: int, what: str, check) -> AdmissionRule:
    return AdmissionRule("RayJob", f"{KUBERAY_SOURCE}:{line}", "ValidateRayJobSpec", what, check)


RAY_JOB_RULES: tuple[AdmissionRule, ...] = (
    RAY_JOB_METADATA_RULE,
    _rayjob(547, "suspend needs shutdownAfterJobFinishes and no clusterSelector", _rj_suspend),
    _rayjob(551, "ttlSecondsAfterFinished is non-negative", _rj_ttl),
    AdmissionRule("RayJob", f"{KUBERAY_SOURCE}:771", "validateDeletionConfiguration",
                  "deletionStrategy is one consistent form", _rj_deletion_strategy),
    _rayjob(567, "clusterSelector names a cluster, without SidecarMode or backoffLimit", _rj_cluster_selector),
    _rayjob(587, "submission-mode restrictions (InteractiveMode, SidecarMode)", _rj_modes),
    _rayjob(606, "no K8s token auth on a RayJob", _rj_k8s_auth),
    _rayjob(619, "deadlines positive, backoffLimit not negative", _rj_deadlines),
)

ALL_RULES: tuple[AdmissionRule, ...] = JOBSET_RULES + RAY_CLUSTER_SPEC_RULES + (RAY_CLUSTER_METADATA_RULE,) + \
    RAY_JOB_RULES


def _cluster_spec_problems(spec: Mapping[str, Any], annotations: Mapping[str, Any], base: tuple,
                           rules: Sequence[AdmissionRule]) -> Iterator[tuple[AdmissionRule, tuple, str]]:
    for rule in rules:
        for path, message in rule.check(spec, annotations):
            yield rule, base + tuple(path), message


def problems_of(obj: Mapping[str, Any],
                rules: Sequence[AdmissionRule] = ALL_RULES) -> Iterator[tuple[AdmissionRule, tuple, str]]:
    """(rule, field path, message) for every refusal of `obj` by the rules that apply to its kind."""
    kind = kind_of(obj)
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if kind == "JobSet":
        defaulted = _defaulted_jobset(obj)
        for rule in rules:
            if rule.kind == "JobSet":
                for path, message in rule.check(defaulted):
                    yield rule, tuple(path), message
    elif kind == "RayCluster":
        for rule in rules:
            if rule.kind == "RayCluster":
                for path, message in rule.check(obj):
                    yield rule, tuple(path), message
        cluster_rules = [r for r in rules if r.kind == "RayClusterSpec"]
        yield from _cluster_spec_problems(obj.get("spec") or {}, annotations, ("spec",), cluster_rules)
    elif kind == "RayJob":
        for rule in rules:
            if rule.kind == "RayJob":
                for path, message in rule.check(obj):
                    yield rule, tuple(path), message
        cluster = (obj.get("spec") or {}).get("rayClusterSpec")
        if isinstance(cluster, dict):
            cluster_rules = [r for r in rules if r.kind == "RayClusterSpec"]
            yield from _cluster_spec_problems(cluster, annotations, ("spec", "rayClusterSpec"), cluster_rules)


def check_admission(objects: Sequence[Mapping[str, Any]]) -> tuple[list[Finding], list[str]]:
    """(errors, notes): every refusal as a finding naming the rule's source, and one note saying what ran."""
    errors: list[Finding] = []
    checked = 0
    for obj in objects:
        if kind_of(obj) not in ("JobSet", "RayCluster", "RayJob"):
            continue
        checked += 1
        for rule, path, message in problems_of(obj):
            errors.append(Finding(object_ref(obj), field_path(path),
                                  f"{message} [{rule.function}, {rule.source.rsplit(' ', 1)[-1]}]"))
    notes = []
    if checked:
        notes.append(f"admission: {checked} object(s), {len(JOBSET_RULES)} JobSet v0.12.0 webhook + "
                     f"{len(RAY_CLUSTER_SPEC_RULES) + len(RAY_JOB_RULES) + 1} KubeRay v1.7.0 rules: "
                     f"{len(errors)} refused")
    return errors, notes
