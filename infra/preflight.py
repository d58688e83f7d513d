"""What the program reads from Google Cloud before it registers anything: the project number, the GKE versions the
location offers, whether the cluster and a kept checkpoint bucket already exist.

Why before, with plain values and not inside `apply`: what these answers decide (refuse a config, adopt a bucket with
`import_`, which resources to register) must be known when resources are registered, and resources are never created
inside `apply`. The price is that these look-ups run before the stack's own `gcp.projects.Service` resources enable
any API. An invoke could be ordered after those resources (InvokeOutputOptions.depends_on), but only as an Output:
a version refusal would then come after the network, bucket and node account were created, half-creating the stack.
So on a project where an API the look-ups need is off, the program refuses in one line naming the one `gcloud`
command that fixes it, before anything exists, and the next `pulumi up` goes through. Which APIs: getServerConfig
(`get_engine_versions`) needs container.googleapis.com (terraform-provider-google
data_source_google_container_engine_versions.go); the project look-up and the provider's reading of every
`google_project_service` need cloudresourcemanager.googleapis.com (resource_google_project_service.go calls
Projects.Get), so the stack could not enable that one itself either.
"""
from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass
from typing import Callable, TypeVar

from infra.config import NAMESPACE, ConfigError, StackConfig
from infra.gke_versions import check_offered, fetch_offered

# Enabled by hand once per project, before the first `pulumi up` (the module docstring says why).
LOOKUP_APIS = ("cloudresourcemanager.googleapis.com", "container.googleapis.com")

# How Google APIs say an API is off: the error reason SERVICE_DISABLED, the older accessNotConfigured, and the
# message texts ("... API has not been used in project N before or it is disabled", "... is not enabled for this
# project"); e.g. banzaicloud/cloudinfo#378, jenkins-x/terraform-google-jx#115.
_DISABLED = re.compile(r"SERVICE_DISABLED|accessNotConfigured|has not been used in project|is not enabled for this "
                       r"project|it is disabled")
_API_NAME = re.compile(r"([a-z0-9-]+\.googleapis\.com)")
# How a look-up says the thing is absent: the Storage API's 404 ("The specified bucket does not exist., notFound")
# and the provider's data-source "... not found" (data_source_google_container_cluster.go).
_NOT_FOUND = re.compile(r"Error 404|notFound|not found|does not exist", re.IGNORECASE)
# How the Google provider says it has no usable credentials: its CheckConfig error "failed to load application
# credentials ... Expanded error message: Attempted to load application default credentials since neither
# `credentials` nor `access_token` was set in the provider block.  No credentials loaded. ... Original error: google:
# could not find default credentials" (pulumi/pulumi-gcp provider/provider_test.go TestCheckConfigNoCredentials;
# terraform-provider-google google/transport/config.go GetCredentials), and an expired login's token refresh
# ("oauth2: \"invalid_grant\" \"reauth related error (invalid_rapt)\"", golang.org/x/oauth2).
_NO_CREDENTIALS = re.compile(r"could not find default credentials|failed to load application credentials|"
                             r"No credentials loaded|invalid_grant|invalid_rapt")
LOGIN_COMMAND = "gcloud auth application-default login"

T = TypeVar("T")


class PreflightError(Exception):
    """A look-up the stack cannot go on without failed; the message is one line saying what to do."""


def enable_command(project: str, extra: tuple[str, ...] = ()) -> str:
    apis = LOOKUP_APIS + tuple(api for api in extra if api not in LOOKUP_APIS)
    return f"gcloud services enable {' '.join(apis)} --project {project}"


def service_disabled(error: Exception, project: str) -> PreflightError | None:
    """The one-line refusal for an API that is off, or None when the error is something else."""
    text = str(error)
    if not _DISABLED.search(text):
        return None
    named = tuple(dict.fromkeys(api for api in _API_NAME.findall(text)))
    which = ", ".join(named) if named else "an API the stack's look-ups need"
    return PreflightError(
        f"{NAMESPACE}: {which} is not enabled in project {project!r}, and the stack reads from it before it can "
        f"enable APIs itself; run once: {enable_command(project, named)} (then pulumi up again)")


def no_credentials(error: Exception) -> PreflightError | None:
    """The one-line refusal for a provider without usable credentials, or None when the error is something else."""
    if not _NO_CREDENTIALS.search(str(error)):
        return None
    what = ("the Google Cloud login has expired" if re.search(r"invalid_grant|invalid_rapt", str(error))
            else "no Google Cloud credentials found")
    # One line within 100 columns, naming the login Pulumi's Google provider reads its credentials from.
    return PreflightError(f"{NAMESPACE}: {what}; run: {LOGIN_COMMAND}")


def _lookup(project: str, call: Callable[[], T]) -> T:
    try:
        return call()
    except Exception as error:  # noqa: BLE001 (the provider's invoke errors are plain Exceptions)
        refusal = service_disabled(error, project) or no_credentials(error)
        if refusal is not None:
            raise refusal from None
        raise


def _exists(project: str, what: str, call: Callable[[], object]) -> bool:
    """True when the look-up finds it, False when it reports it absent; anything else is refused in one line."""
    return _find(project, what, call) is not None


def _find(project: str, what: str, call: Callable[[], T]) -> T | None:
    """What the look-up finds, None when it reports it absent; anything else is refused in one line."""
    try:
        return _lookup(project, call)
    except PreflightError:
        raise
    except Exception as error:  # noqa: BLE001
        if _NOT_FOUND.search(str(error)):
            return None
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise PreflightError(f"{NAMESPACE}: could not look up {what}: {first}") from None


@dataclass(frozen=True)
class Preflight:
    project_number: str
    deployer: str | None = None    # who runs `pulumi up`, as an IAM member; None: the look-up could not say
    adopt_bucket: bool = False     # a kept checkpoint bucket of this name exists: import it instead of creating it
    warnings: tuple[str, ...] = ()


@dataclass(frozen=True)
class KeptBucket:
    """What the look-up read of a bucket kept by an earlier `pulumi destroy`, in the stack's terms."""
    location: str                          # as Cloud Storage reports it: upper case (US-EAST5, NAM4, US)
    hierarchical_namespace: bool
    soft_delete_days: float | None         # None: no soft-delete policy
    expiring_prefixes: dict[str, int]      # Delete rules as prefix -> age in days; other rules as "other: ..." keys
    labels: dict[str, str]                 # the bucket's labels less those Google's tools add (goog-*)

    @classmethod
    def from_lookup(cls, found: object) -> "KeptBucket":
        def first(items: object) -> object:
            return items[0] if items else None

        policy = first(getattr(found, "soft_delete_policies", None))
        seconds = getattr(policy, "retention_duration_seconds", None) if policy is not None else None
        rules: dict[str, int] = {}
        for rule in getattr(found, "lifecycle_rules", None) or []:
            action, condition = first(rule.actions), first(rule.conditions)
            prefixes = list(getattr(condition, "matches_prefixes", None) or [])
            if getattr(action, "type", None) == "Delete" and len(prefixes) == 1 and condition.age:
                rules[prefixes[0]] = int(condition.age)
            else:
                rules[f"other: {getattr(action, 'type', '?')} rule"] = 0
        namespace = first(getattr(found, "hierarchical_namespaces", None))
        return cls(location=str(getattr(found, "location", "") or ""),
                   hierarchical_namespace=bool(getattr(namespace, "enabled", False)),
                   soft_delete_days=None if seconds is None else seconds / _DAY_SECONDS,
                   expiring_prefixes=rules, labels=user_labels(getattr(found, "effective_labels", None)))


_DAY_SECONDS = 24 * 3600
# Label keys Google's own tools put on resources, which no stack sets: pulumi-gcp's `goog-pulumi-provisioned`, and
# the goog- prefix Google reserves for its services (https://cloud.google.com/resource-manager/docs/labels-overview).
_GOOGLE_LABEL_PREFIX = "goog-"


def user_labels(effective: object) -> dict[str, str]:
    """The labels a bucket really has, as the stack compares them. The data source's `labels` holds only the keys
    a configuration set, which a data source never has, so it is always empty: terraform-provider-google
    data_source_google_storage_bucket.go reads through setStorageBucket (resource_storage_bucket.go), which fills
    `labels` with tpgresource.SetLabels (google/tpgresource/labels.go: only configured keys) and `effective_labels`
    with every label of the API's answer; it never calls SetDataSourceLabels, which would copy them."""
    return {key: value for key, value in sorted(dict(effective or {}).items())
            if not key.startswith(_GOOGLE_LABEL_PREFIX)}


def kept_bucket_problems(config: StackConfig, found: KeptBucket) -> list[str]:
    """What makes a kept bucket impossible to adopt: a bucket's location and hierarchical namespace are fixed at
    creation (https://cloud.google.com/storage/docs/moving-buckets; https://cloud.google.com/storage/docs/
    hns-overview: enabled only when the bucket is created), so either difference turns the import into a replace,
    which `protect` refuses or which fails with 409 on the name. One line each, naming both values."""
    storage, problems = config.storage, []
    name = storage.bucket_name
    if found.location and found.location.upper() != storage.location.upper():
        problems.append(f"{NAMESPACE}:bucketLocation={storage.location!r} but the kept bucket {name!r} is in "
                        f"{found.location}; a bucket cannot move: set bucketLocation: {found.location.lower()} "
                        "(or bucketName to a new bucket)")
    if not found.hierarchical_namespace:
        problems.append(f"{NAMESPACE}:bucketName={name!r} is a kept bucket without hierarchical namespace, and the "
                        "stack's checkpoint bucket needs it (it can only be set at creation); set bucketName to a "
                        "new bucket")
    return problems


def adoption_changes(config: StackConfig, found: KeptBucket) -> list[str]:
    """The settings `pulumi up` will change on the kept bucket when it adopts it (Pulumi imports a resource whose
    inputs differ and then updates it, since 3.174: pulumi/pulumi CHANGELOG): a heading line, then one line per
    setting, current -> new; nothing when the bucket already matches."""
    from infra.storage import BUCKET_LABELS, EXPIRING_PREFIXES

    name, changes = config.storage.bucket_name, []
    wanted_days = config.storage.soft_delete_days
    if found.soft_delete_days != wanted_days:
        current = "none" if found.soft_delete_days is None else f"{found.soft_delete_days:g} days"
        changes.append(f"soft delete {current} -> {wanted_days} days")
    if found.expiring_prefixes != EXPIRING_PREFIXES:
        # As a difference (what goes, what comes): both lists in full would not fit a line.
        def rule(prefix: str, days: int) -> str:
            return prefix if prefix.startswith("other:") else f"{prefix} {days}d"
        gone = [rule(p, d) for p, d in sorted(found.expiring_prefixes.items()) if EXPIRING_PREFIXES.get(p) != d]
        new = [rule(p, d) for p, d in sorted(EXPIRING_PREFIXES.items()) if found.expiring_prefixes.get(p) != d]
        changes.append("lifecycle rules: " + ", ".join([f"- {r}" for r in gone] + [f"+ {r}" for r in new]))
    if found.labels != BUCKET_LABELS:
        changes.append(f"labels {found.labels or '{}'} -> {BUCKET_LABELS}")
    # The bucket's name (up to 63 characters) on a line of its own, so each change fits 100 columns.
    return [f"adopting kept bucket {name}, which changes:", *(f"  {change}" for change in changes)] if changes else []


def holds_bucket(config: StackConfig, project_number: str, policy_data: Callable[[], str]) -> bool:
    """Whether this stack holds the existing checkpoint bucket, read from what exists in Google Cloud: the bucket's
    IAM policy grants this stack's training identity the checkpoint role. Only a `pulumi up` of the stack creates
    that binding (infra/identity.py, on the bucket the stack holds) and `pulumi destroy` deletes it while it keeps
    the bucket (the binding is not retained), so a bucket kept by a destroy lacks it. The bucket's labels cannot
    tell the two apart: destroy leaves a kept bucket's labels as they were. A policy that cannot be read (another
    identity, a transient error) counts as not held: the adoption is announced, which is the safe mistake."""
    from infra.identity import CHECKPOINT_ROLE, workload_identity_member

    member = workload_identity_member(project_number, config.gcp.project, config.kubernetes.namespace,
                                      config.kubernetes.service_account)
    try:
        policy = json.loads(policy_data() or "{}")
    except Exception:  # noqa: BLE001 (the provider's invoke errors are plain Exceptions; bad JSON is the same answer)
        return False
    return any(binding.get("role") == CHECKPOINT_ROLE and member in (binding.get("members") or [])
               and not binding.get("condition") for binding in policy.get("bindings") or [])


def run(config: StackConfig, location: str) -> Preflight:
    """The look-ups, in the order a fresh project needs them to fail. Raises PreflightError or ConfigError."""
    import pulumi_gcp as gcp

    project = config.gcp.project
    project_number = _lookup(project, lambda: gcp.organizations.get_project(project_id=project).number)
    offered = _lookup(project, lambda: fetch_offered(project, location))
    warnings: tuple[str, ...] = ()
    problems = check_offered(config.cluster, location, offered)
    if problems:
        # GKE retires versions; a version that was offered when the cluster was created must not stop every later
        # `up` of it (the provider treats min_master_version as a floor the running cluster already meets). So
        # the check refuses only a cluster still to be created, and warns for one that exists.
        exists = _exists(project, f"cluster {config.cluster.name!r} in {location}", lambda: gcp.container.get_cluster(
            name=config.cluster.name, location=location, project=project))
        if not exists:
            raise ConfigError(problems)
        warnings = tuple(f"{problem} (cluster {config.cluster.name} already exists and keeps running; this would be "
                         "refused for a new cluster)" for problem in problems)
    adopt = False
    if config.storage.keep_on_destroy:
        # A bucket kept by an earlier `pulumi destroy` is still there under the same name; the provider does not
        # adopt existing buckets, so creating it again fails with 409 (pulumi/pulumi#3388: no "adopt if exists").
        # The stack's own bucket is in the stack's project (project=: what the look-up names; the bucket's
        # project number comes from Cloud Storage's answer either way).
        found = _find(project, f"bucket {config.storage.bucket_name!r}",
                      lambda: gcp.storage.get_bucket(name=config.storage.bucket_name, project=project))
        if found is not None:
            kept = KeptBucket.from_lookup(found)
            problems = kept_bucket_problems(config, kept)
            if problems:
                raise ConfigError(problems)
            # Imported on every `up` that finds it (Pulumi ignores `import_` for a bucket already in the state), but
            # announced only for a bucket the stack does not hold: the later `up` of a living stack changes the
            # bucket like any other resource, and its preview shows that.
            adopt = True
            if not holds_bucket(config, str(project_number), lambda: gcp.storage.get_bucket_iam_policy(
                    bucket=config.storage.bucket_name).policy_data):
                warnings += tuple(adoption_changes(config, kept))
    build_account = config.worker_image.build_account_id if config.worker_image else None
    deployer, warning = deployer_member(project, config.names.node_service_account,
                                        lambda: gcp.organizations.get_client_open_id_user_info().email,
                                        build_account_id=build_account)
    # With adminBootstrap the admin's step granted the deployer actAs on both accounts: nothing is missing.
    warnings += (warning,) if warning and not config.gcp.admin_bootstrap else ()
    return Preflight(project_number=str(project_number), deployer=deployer, adopt_bucket=adopt,
                     warnings=warnings)


def deployer_member(project: str, node_account_id: str, email: Callable[[], str],
                    build_account_id: str | None = None) -> tuple[str | None, str | None]:
    """Who runs `pulumi up` as an IAM member (the provider's OpenID user info of its credentials: their e-mail),
    or None and the warning that says which grant the deployer then needs to make itself."""
    from infra.identity import ACT_AS_ROLE, member_of_email

    try:
        found = email()
    except Exception as error:  # noqa: BLE001 (the provider's invoke errors are plain Exceptions)
        first = (str(error).strip().splitlines() or [type(error).__name__])[0]
        # The provider's "invoke of TOKEN failed: REASON (FIELD)": the reason is what the user needs.
        found, why = None, re.sub(r"^invoke of \S+ failed: |\s*\(\w+\)$", "", first)
    else:
        why = "no e-mail in the credentials' user info"
    if found:
        return member_of_email(found), None
    accounts = [node_account_id] + ([build_account_id] if build_account_id else [])
    # terraform-provider-google data_source_google_client_openid_userinfo.go reads the OpenID userinfo endpoint,
    # which answers only for credentials with the userinfo.email scope. Every line within 100 columns.
    lines = [f"{NAMESPACE}: who runs pulumi up is not known:"]
    lines += textwrap.wrap(f"({why});", 98, initial_indent="  ", subsequent_indent="  ")
    lines += ["  the cluster and node pools act as the node account"
              + (", the image build as the build account" if build_account_id else "") + ";",
              "  grant it actAs once they exist, then pulumi up again:"]
    for account_id in accounts:
        lines += ["  gcloud iam service-accounts add-iam-policy-binding \\",
                  f"    {account_id}@{project}.iam.gserviceaccount.com \\",
                  f"    --member=user:YOU@EXAMPLE.COM --role={ACT_AS_ROLE}"]
    return None, "\n".join(lines)
