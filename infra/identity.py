"""Identities: the nodes' own least-privilege service account, and the training pods' Workload Identity."""
from __future__ import annotations

import hashlib
import re

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from infra import naming
from infra.component import child_options, component_type, deleted_with_cluster
from infra.config import StackConfig
from infra.config.key_checks import split_gs_path

# GKE's documented minimum for a custom node service account (logging, monitoring, metadata);
# https://cloud.google.com/kubernetes-engine/docs/how-to/service-accounts#default-gke-service-agent
NODE_ROLES = ("roles/container.defaultNodeServiceAccount",)
# With the workers' image, the pools stream it (GKE Image streaming, infra/cluster.py image_streaming), and "if you
# use a custom service account for your nodes, it needs roles/serviceusage.serviceUsageConsumer on the project
# that hosts the image" (https://cloud.google.com/kubernetes-engine/docs/how-to/image-streaming, Requirements);
# without it nodes may fall back to pulling the whole image. Granted only when the stack builds the image.
STREAMING_ROLES = ("roles/serviceusage.serviceUsageConsumer",)

# What the account that runs `pulumi up` needs on the node service account to create clusters and node pools that
# run as it (actAs), granted by the stack on that account only (NodeServiceAccount).
ACT_AS_ROLE = "roles/iam.serviceAccountUser"


def member_of_email(email: str) -> str:
    """An identity's e-mail as an IAM member: serviceAccount:... for a service account, else user:...."""
    return f"{'serviceAccount' if email.endswith('.gserviceaccount.com') else 'user'}:{email}"


# Read and write objects, nothing on the bucket itself (no IAM or lifecycle changes).
CHECKPOINT_ROLE = "roles/storage.objectUser"
# MaxText opens its checkpoint directory through maxtext/utils/gcs_utils.py `mkdir_and_check_permissions`
# (called from maxtext/common/checkpointing.py), which calls `storage.Client().get_bucket(name)` and fails the run
# with "GCS bucket ... not found or accessible" without `storage.buckets.get`; objectUser does not carry it (IAM
# predefined roles, Cloud Storage). The least predefined role that does: roles/storage.legacyBucketReader
# (storage.buckets.get + storage.objects.list, and objects.list is already in objectUser), granted on this bucket
# only. roles/storage.bucketViewer also carries buckets.get but adds storage.buckets.list and more bucket metadata
# reads. Google's TPU Ray sample grants the same role for the same call (GoogleCloudPlatform/kubernetes-engine-samples
# ai-ml/gke-ray/tpu/get-started/cluster/main.tf, "workload_data_bucketread"), on a bucket with uniform
# bucket-level access like ours.
BUCKET_METADATA_ROLE = "roles/storage.legacyBucketReader"
# Logical name of each bucket binding → role (names stable: a binding's URN is its identity).
BUCKET_ROLES = (("checkpoints-object-user", CHECKPOINT_ROLE), ("checkpoints-bucket-reader", BUCKET_METADATA_ROLE))

# What MaxText's goodput recording and monitoring (core.maxtext_args GOODPUT_OVERRIDES) do as the training
# pod, read in ml-goodput-measurement 0.2.3 (github.com/AI-Hypercomputer/ml-goodput-measurement,
# ml_goodput_measurement/src/): GoodputRecorder writes job/step events to Cloud Logging (logWriter);
# GoodputMonitor reads them back with Logger.list_entries (goodput.py: entries.list on projects/PROJECT filtered by
# its log name) and uploads goodput, badput and step-deviation series with MetricServiceClient.create_time_series
# (gcp_metrics.py: metricWriter). Project-level because that is where log entries and time series live; the
# principal is this stack's training identity only.
TELEMETRY_ROLES = ("roles/monitoring.metricWriter", "roles/logging.logWriter")
# Reading the entries back needs logging.logEntries.list and nothing else (Cloud Logging API entries.list,
# https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list, "Authorization requires ...
# logging.logEntries.list"). roles/logging.viewer, the smallest predefined role holding it, adds reading every
# sink, log bucket, view, metric, exclusion and log-based alert of the project
# (https://cloud.google.com/iam/docs/roles-permissions/logging), so the stack grants a custom role with that one
# permission instead. It still lets the pod read every non-private entry of the project's _Default bucket: the API
# has no narrower permission for a project-scope read. Creating it needs iam.roles.create where `pulumi up` runs
# (roles/iam.roleAdmin, or Owner).
GOODPUT_LOG_PERMISSIONS = ("logging.logEntries.list",)

# A custom role's id is held by IAM after the role is deleted: the provider can undelete it for 7 days, and from day
# 7 to day 37 no role of that id can be created or changed (terraform-provider-google
# website/docs/r/google_project_iam_custom_role.html.markdown, "soft-delete"; create fails "You can't create a
# role_id ... which has been marked for deletion", resource_google_project_iam_custom_role.go). So the id is new per
# creation of the stack: its suffix is read from the node service account's uniqueId, which IAM assigns anew every
# time the account is created, even under the same name (https://cloud.google.com/iam/docs/service-accounts-
# delete-undelete: a new account with a deleted one's name is a different identity with a different unique ID), and
# Pulumi keeps it in state. An `up` of a living stack reads the same uniqueId and leaves the role alone; a
# `destroy` deletes both, and the next `up` gets a new account, so a new role id.
# IAM role ids: ^[a-zA-Z0-9_.]{3,64}$ (terraform-provider-google google/verify/validation.go, validateIAMCustomRoleID).
ROLE_ID = re.compile(r"^[a-zA-Z0-9_.]{3,64}$")
ROLE_ID_MAX = 64
_ROLE_PREFIX = "tpuGoodput_"
_ROLE_SUFFIX = 10   # hex characters of the account's uniqueId hash


def goodput_role_stem(cluster_name: str) -> str:
    """What every goodput role id of this cluster starts with: all but the per-creation suffix."""
    name = naming.fit(cluster_name, ROLE_ID_MAX - len(_ROLE_PREFIX) - 1 - _ROLE_SUFFIX)
    return f"{_ROLE_PREFIX}{name.replace('-', '_')}_"


def goodput_role_id(cluster_name: str, account_unique_id: str) -> str:
    """Project-unique custom role id, new for every creation of the node account (see above); fits 64 characters
    for every cluster name config accepts (at most 40 characters)."""
    suffix = hashlib.sha256(account_unique_id.encode()).hexdigest()[:_ROLE_SUFFIX]
    return goodput_role_stem(cluster_name) + suffix


def admin_goodput_role_id(cluster_name: str) -> str:
    """The goodput role's id with adminBootstrap: fixed, because the admin's step creates it once and the stack
    never deletes it (so IAM's soft-deleted ids never collide), and because the deployer's condition must name it
    as a constant (https://cloud.google.com/iam/docs/setting-limits-on-granting-roles)."""
    return goodput_role_stem(cluster_name) + "admin"


def admin_account_email(account_id: str, project: str) -> str:
    """A user-managed service account's e-mail: ACCOUNT_ID@PROJECT_ID.iam.gserviceaccount.com
    (https://cloud.google.com/iam/docs/service-account-overview)."""
    return f"{account_id}@{project}.iam.gserviceaccount.com"


def display_name(cluster: str) -> str:
    return f"GKE nodes of {cluster}"


GOODPUT_ROLE_TITLE = "tpu-multislice goodput log reader"


def goodput_role_description(cluster: str) -> str:
    return f"Reads the goodput log entries of the training runs on {cluster}"


def custom_role_stem(role: str) -> str | None:
    """A custom role name (projects/P/roles/ID) the stack grants, less the per-creation suffix its id ends with
    (goodput_role_id); None for a predefined role (roles/...)."""
    if not role.startswith("projects/"):
        return None
    stem, _, suffix = role.rpartition("_")
    return f"{stem}_" if re.fullmatch(f"[0-9a-f]{{{_ROLE_SUFFIX}}}", suffix) else role


def workload_identity_principal(project_number: pulumi.Input[str], project: str, namespace: str,
                                service_account: str) -> pulumi.Output[str]:
    """IAM principal of a Kubernetes service account under GKE Workload Identity Federation."""
    return pulumi.Output.from_input(project_number).apply(
        lambda number: workload_identity_member(str(number), project, namespace, service_account))


def workload_identity_member(project_number: str, project: str, namespace: str, service_account: str) -> str:
    """The same principal as a plain value, for what is decided before anything registers (infra/preflight.py,
    infra/bucket_access.py)."""
    return (f"principal://iam.googleapis.com/projects/{project_number}/locations/global/workloadIdentityPools/"
            f"{project}.svc.id.goog/subject/ns/{namespace}/sa/{service_account}")


class NodeServiceAccount(pulumi.ComponentResource):
    """A dedicated service account for every node pool instead of the Compute Engine default account
    (which holds Editor on the project in many organisations)."""

    def __init__(self, name: str, project: str, names: naming.Names, depends_on: list[pulumi.Resource],
                 deployer: str | None = None, streams_images: bool = False, admin_managed: bool = False,
                 opts: pulumi.ResourceOptions | None = None):
        super().__init__(component_type("infra", "NodeServiceAccount"), name, None, opts)
        if admin_managed:
            # adminBootstrap: the admin's step created the account and granted the deployer actAs on it
            # (preview/deployer_roles.py admin_script); its e-mail follows from its id.
            self.account = None
            email: pulumi.Input[str] = admin_account_email(names.node_service_account, project)
        else:
            self.account = gcp.serviceaccount.Account(
                "nodes", account_id=names.node_service_account, project=project,
                display_name=display_name(names.cluster),
                opts=child_options(self, depends_on=depends_on))
            email = self.account.email
        self.bindings = [
            gcp.projects.IAMMember(
                f"nodes-{role.split('/')[-1]}", project=project, role=role,
                member=pulumi.Output.concat("serviceAccount:", email),
                opts=child_options(self, depends_on=depends_on if admin_managed else None))
            for role in NODE_ROLES + (STREAMING_ROLES if streams_images else ())
        ]
        self.email = pulumi.Output.from_input(email)
        # Creating a cluster or node pool that runs as this account needs iam.serviceAccounts.actAs on it
        # (https://cloud.google.com/kubernetes-engine/docs/how-to/service-accounts). The account exists only
        # once this stack creates it, so no grant printed before the first `pulumi up` can name it; the stack
        # grants whoever runs `pulumi up` (deployer, read by infra/preflight.py) roles/iam.serviceAccountUser on
        # this account alone, which the deployer's roles/iam.serviceAccountAdmin may do (it holds
        # iam.serviceAccounts.setIamPolicy), instead of project-wide actAs on every service account. With
        # adminBootstrap the admin's step made that grant, and the stack makes none.
        self.act_as = None if deployer is None or self.account is None else gcp.serviceaccount.IAMMember(
            "nodes-deployer-act-as", service_account_id=self.account.name, role=ACT_AS_ROLE, member=deployer,
            opts=child_options(self))
        # The email as the cluster and node pools take it: once the deployer may act as the account.
        self.email_to_run_as = self.email if self.act_as is None else pulumi.Output.all(
            self.email, self.act_as.id).apply(lambda values: values[0])
        # Assigned by IAM at each creation: the goodput role's id is derived from it (goodput_role_id); None with
        # adminBootstrap, whose role id is fixed (admin_goodput_role_id).
        self.unique_id = None if self.account is None else self.account.unique_id
        self.register_outputs({"email": self.email})


def goodput_reader_role(parent: pulumi.Resource, project: str, cluster_name: str,
                        node_account_unique_id: pulumi.Input[str],
                        services: list[pulumi.Resource] | None
                        ) -> tuple[gcp.projects.IAMCustomRole, pulumi.Output[str]]:
    """The custom role of GOODPUT_LOG_PERMISSIONS, its id new for every creation of the node account, and its
    name projects/PROJECT/roles/ID, what a binding names it by."""
    role_id = pulumi.Output.from_input(node_account_unique_id).apply(
        lambda unique_id: goodput_role_id(cluster_name, unique_id))
    # The role and the project grants need iam.googleapis.com / cloudresourcemanager: after the stack's APIs.
    role = gcp.projects.IAMCustomRole(
        "goodput-log-reader", project=project, role_id=role_id, title=GOODPUT_ROLE_TITLE,
        description=goodput_role_description(cluster_name),
        permissions=list(GOODPUT_LOG_PERMISSIONS), opts=child_options(parent, depends_on=list(services or [])))
    return role, pulumi.Output.concat("projects/", project, "/roles/", role_id)


class WorkloadIdentity(pulumi.ComponentResource):
    """Namespace + Kubernetes service account of the training pods, allowed to use the checkpoint bucket.

    The binding names the KSA directly as a Workload Identity Federation principal, so no Google service
    account or impersonation annotation is needed. The project number is looked up (infra/preflight.py),
    never typed.
    """

    def __init__(self, name: str, config: StackConfig, project_number: str, bucket: gcp.storage.Bucket,
                 cluster: pulumi.Resource, k8s_provider: k8s.Provider, node_service_account: pulumi.Input[str],
                 node_account_unique_id: pulumi.Input[str], services: list[pulumi.Resource] | None = None,
                 read_granted: tuple[str, ...] | None = None, opts: pulumi.ResourceOptions | None = None,
                 shared_reader_role: pulumi.Input[str] | None = None):
        """shared_reader_role: a run on a shared cluster binds to the cluster stack's goodput log role
        (SharedGoodputRole) instead of creating one."""
        super().__init__(component_type("infra", "WorkloadIdentity"), name, None, opts)
        ns, ksa, project = config.kubernetes.namespace, config.kubernetes.service_account, config.gcp.project

        # Kubernetes objects go away with the cluster: deleting them one by one first would only make
        # `pulumi destroy` wait on an API server that is being torn down.
        k8s_options = child_options(self, provider=k8s_provider, deleted_with=deleted_with_cluster(cluster))
        self.namespace = k8s.core.v1.Namespace(
            "namespace", metadata=k8s.meta.v1.ObjectMetaArgs(name=ns, labels={"app": "tpu-multislice"}),
            opts=k8s_options)
        self.principal = workload_identity_principal(project_number, project, ns, ksa)
        # The identity pool PROJECT.svc.id.goog exists once the cluster exists: bind after it.
        self.bucket_bindings = [
            gcp.storage.BucketIAMMember(logical_name, bucket=bucket.name, role=role, member=self.principal,
                                        opts=child_options(self, depends_on=[cluster]))
            for logical_name, role in BUCKET_ROLES
        ]
        if config.gcp.admin_bootstrap:
            # The admin's step created the role under a fixed id (preview/deployer_roles.py admin_script).
            self.goodput_reader_role = None
            reader = pulumi.Output.concat("projects/", project, "/roles/",
                                          admin_goodput_role_id(config.cluster.name))
            reader_needs: list[pulumi.Resource] = list(services or [])
        elif shared_reader_role is None:
            self.goodput_reader_role, reader = goodput_reader_role(self, project, config.cluster.name,
                                                                   node_account_unique_id, services)
            reader_needs = [self.goodput_reader_role]
        else:
            self.goodput_reader_role, reader, reader_needs = None, shared_reader_role, []
        telemetry = [(f"goodput-{role.split('/')[-1]}", role, []) for role in TELEMETRY_ROLES]
        telemetry.append(("goodput-log-reader", reader, reader_needs))
        self.telemetry_bindings = [
            gcp.projects.IAMMember(logical_name, project=project, role=role, member=self.principal,
                                   opts=child_options(self, depends_on=[cluster, *needs]))
            for logical_name, role, needs in telemetry
        ]
        if config.pods_use_host_network:
            # Host-network pods authenticate as the node: give the node account the same object access, on
            # this bucket only (nothing project-wide).
            node_member = pulumi.Output.concat("serviceAccount:", node_service_account)
            self.bucket_bindings += [
                gcp.storage.BucketIAMMember(f"{logical_name}-nodes", bucket=bucket.name, role=role,
                                            member=node_member, opts=child_options(self))
                for logical_name, role in BUCKET_ROLES
            ]
            # ... and the goodput roles, granted explicitly rather than assumed to be inside the node role. On a
            # shared cluster the node account is every run's: the cluster stack grants them once
            # (workloads/stack_programs.py), never a run, whose destroy would take them from the others.
            self.telemetry_bindings += [] if shared_reader_role is not None else [
                gcp.projects.IAMMember(f"{logical_name}-nodes", project=project, role=role, member=node_member,
                                       opts=child_options(self, depends_on=needs))
                for logical_name, role, needs in telemetry
            ]
        # Read-only access to the run's data and starting weights (datasetPath, evalDatasetPath,
        # loadParametersPath), on exactly their buckets, where the stack may grant (read_granted: the buckets
        # infra/bucket_access.py found in the stack's project; None: all of them).
        self.read_bindings = read_only_bindings(self, config, self.principal, node_service_account, cluster,
                                                read_granted)
        # Every training pod runs as this service account and every workload waits for it (workloads/), so it is
        # created only once all of the grants above exist: a pod that starts before its bucket binding fails its
        # first checkpoint with 403 and burns a restart. (IAM changes still take effect eventually, usually within
        # minutes: https://cloud.google.com/iam/docs/access-change-propagation.)
        self.service_account = k8s.core.v1.ServiceAccount(
            "trainer", metadata=k8s.meta.v1.ObjectMetaArgs(
                name=ksa, namespace=self.namespace.metadata.name, labels={"app": "tpu-multislice"}),
            opts=child_options(self, provider=k8s_provider, deleted_with=deleted_with_cluster(cluster),
                               depends_on=[*self.bucket_bindings, *self.telemetry_bindings,
                                           *self.read_bindings]))
        self.namespace_name = self.namespace.metadata.name
        self.service_account_name = self.service_account.metadata.name
        self.register_outputs({
            "namespace": self.namespace_name,
            "serviceAccount": self.service_account_name,
            "principal": self.principal,
        })


# ---- read-only access to the run's data and starting weights --------------------------------------------

# roles/storage.objectViewer: storage.objects.get and storage.objects.list (and nothing that writes), what
# reading files and listing a glob need: Grain through the FUSE mount (Cloud Storage FUSE lists and reads
# objects) and Orbax reading load_parameters_path. No bucket-level role: unlike the checkpoint directory
# (BUCKET_METADATA_ROLE), nothing reads these buckets' metadata (IAM predefined roles, Cloud Storage).
READ_ROLE = "roles/storage.objectViewer"


def read_buckets(config: StackConfig) -> tuple[str, ...]:
    """The buckets the run only reads, each once, in the order the config names them; the checkpoint bucket is
    left out (the identity already reads and writes it)."""
    buckets = (split_gs_path(path)[0] for path in config.workload.run.read_paths)
    return tuple(bucket for bucket in dict.fromkeys(buckets) if bucket != config.storage.bucket_name)


def read_only_bindings(parent: pulumi.Resource, config: StackConfig, principal: pulumi.Input[str],
                       node_service_account: pulumi.Input[str], cluster: pulumi.Resource,
                       granted: tuple[str, ...] | None = None) -> list[pulumi.Resource]:
    """objectViewer on each bucket the run reads and the stack may grant on (`granted`; None: every one), for the
    training identity (and the node account where the pods run on the host network, as for the checkpoint bucket).
    Logical names carry the bucket: another bucket is another binding, and the same bucket keeps its binding."""
    members = [("", principal, [cluster])]
    # On a shared cluster the node account is every run's: a run grants it nothing (shared_node_reads).
    if config.pods_use_host_network and not config.stack.run:
        members.append(("-nodes", pulumi.Output.concat("serviceAccount:", node_service_account), []))
    return [gcp.storage.BucketIAMMember(f"read-{bucket}{suffix}", bucket=bucket, role=READ_ROLE, member=member,
                                        opts=child_options(parent, depends_on=needs))
            for bucket in read_buckets(config) if granted is None or bucket in granted
            for suffix, member, needs in members]


def shared_node_reads(config: StackConfig) -> list[str]:
    """A run on a shared cluster whose pods run on the host network reads its data as the cluster's node account,
    which every run shares: the grant is the cluster owner's to make once (a run that made it would take it from
    the others on destroy). The commands that make it."""
    if not (config.stack.run and config.pods_use_host_network):
        return []
    account = f"{config.names.node_service_account}@{config.gcp.project}.iam.gserviceaccount.com"
    return [f"gcloud storage buckets add-iam-policy-binding gs://{bucket} "
            f"--member=serviceAccount:{account} --role={READ_ROLE}" for bucket in read_buckets(config)]
