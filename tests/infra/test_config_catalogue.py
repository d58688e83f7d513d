"""The catalogue of wrong and valid configs (issue 13): every wrong config refused, every valid one accepted.

One line per case: overrides on top of a base config → refused with these words, or accepted. Refusals are
grouped by the class of mistake:

- VALUES: one key's own value (type, choices, per-key checks in schema.py/key_checks.py);
- GCP_FACTS: facts about GCP (regions, zone x TPU generation, bucket locations, CIDRs and their sizes, Autopilot's
  release channel, reservation and machine-type names; infra/config/tpu_zones.py);
- DOES_NOTHING: a key the user set where the chosen backend or mode never reads it (schema Key.applies_to);
- MESSAGES: the line blames the key the user set, and one mistake gives one line (no follow-on lines);
- CROSS_KEY: the other rules between keys (versions, planner, backends).

Every refusal runs through infra.config.build, the function `pulumi up` runs first (__main__.py), and must give
exactly one problem line naming the key the user set and its value. A subset also runs the whole program under
the Pulumi mocks (preview.harness.run_program), as `pulumi up` would: the refusal is a pulumi.RunError without a
traceback, and nothing is registered. VALID lists configs that must build (with what they derive); a subset of
them renders under run_program.
"""
from __future__ import annotations

import pulumi
import pytest

from infra.config import NAMESPACE, ConfigError, build
from preview.harness import GcpMocks, RecordingMonitor, run_program
from preview.stack_files import load_stack_config
from tests.conftest import COMMITTED_STACKS, MINIMAL, REPO

SMALL = {**MINIMAL, "model": "qwen3-0.6b"}                     # fits every slice shape below
JOBSET = {**MINIMAL, "workloadBackend": "jobset"}
PATHWAYS = {**MINIMAL, "workloadBackend": "pathways"}
AUTOPILOT = {**MINIMAL, "clusterMode": "autopilot"}
V5E = {**SMALL, "zone": "us-central1-a", "tpuGeneration": "v5e"}
V4 = {**SMALL, "zone": "us-central2-b", "tpuGeneration": "v4", "tpuTopology": "2x2x2"}
V5P = {**SMALL, "zone": "us-east5-a", "tpuGeneration": "v5p", "tpuTopology": "2x2x2"}
TPU7X = {**SMALL, "zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x2"}
LB = {**MINIMAL, "dashboardExposure": "internal-lb", "dashboardSourceRanges": ["10.0.0.0/8"]}

# (case id, base, overrides, the KEY=VALUE the line must name, further words the line must hold)
VALUES = [
    # Both set: the pair is refused, and the line names the machine type the user chose as well.
    ("topology not on the chosen machine", V5E, {"tpuTopology": "2x4", "tpuMachineType": "ct5lp-hightpu-4t"},
     "tpuTopology='2x4'", ["tpuMachineType='ct5lp-hightpu-4t'", "4x4"]),
    ("unknown key, close match", MINIMAL, {"slice": 3}, "slice", ["did you mean 'slices'"]),
    ("unknown key, no match", MINIMAL, {"zzz": 1}, "zzz", ["known keys:"]),
    ("project missing", {"zone": "us-east5-b"}, {}, "project", ["is required"]),
    ("zone missing", {"project": "my-tpu-project"}, {}, "zone", ["is required"]),
    ("project id with spaces", MINIMAL, {"project": "My Project"}, "project='My Project'", ["6-30"]),
    ("project id too short", MINIMAL, {"project": "abc"}, "project='abc'", ["6-30"]),
    ("generation unknown", MINIMAL, {"tpuGeneration": "v7"}, "tpuGeneration='v7'", ["v4, v5e, v5p, v6e, tpu7x"]),
    ("slices zero", MINIMAL, {"slices": 0}, "slices=0", ["at least 1"]),
    ("slices not an integer", MINIMAL, {"slices": "two"}, "slices='two'", ["must be an integer"]),
    ("slices a fraction", MINIMAL, {"slices": "1.5"}, "slices='1.5'", ["must be an integer"]),
    ("boolean not a boolean", MINIMAL, {"deletionProtection": "yes"}, "deletionProtection='yes'",
     ["true or false"]),
    ("memory check not a boolean", MINIMAL, {"memoryCheck": "maybe"}, "memoryCheck='maybe'", ["true or false"]),
    ("memory check off without the compiled batch", MINIMAL, {"memoryCheck": "false"}, "memoryCheck=false",
     ["perDeviceBatchSize too"]),
    ("memory check off, batch not a number", MINIMAL, {"memoryCheck": "false", "perDeviceBatchSize": "two"},
     "perDeviceBatchSize='two'", ["positive number"]),
    ("warm slices negative", MINIMAL, {"warmSlices": -1}, "warmSlices=-1", ["0 (every slice scales to zero"]),
    ("no checkpoint kept", MINIMAL, {"checkpointsToKeep": 0}, "checkpointsToKeep=0", ["at least 1"]),
    ("capacity not a choice", MINIMAL, {"capacity": "preemptible"}, "capacity='preemptible'",
     ["on-demand, spot, reservation, flex-start"]),
    ("cluster mode not a choice", MINIMAL, {"clusterMode": "serverless"}, "clusterMode='serverless'",
     ["standard, autopilot"]),
    ("release channel lowercase", MINIMAL, {"releaseChannel": "regular"}, "releaseChannel='regular'",
     ["RAPID, REGULAR"]),
    ("backend not a choice", MINIMAL, {"workloadBackend": "slurm"}, "workloadBackend='slurm'",
     ["rayjob, jobset, pathways"]),
    ("cluster name too long", MINIMAL, {"clusterName": "a" * 41}, "clusterName='" + "a" * 41, ["1-40"]),
    ("cluster name uppercase", MINIMAL, {"clusterName": "TPU"}, "clusterName='TPU'", ["lowercase"]),
    ("cluster name ends with dash", MINIMAL, {"clusterName": "tpu-"}, "clusterName='tpu-'", ["not ending"]),
    ("namespace not a label", MINIMAL, {"namespace": "Training"}, "namespace='Training'", ["DNS-1123"]),
    ("service account underscore", MINIMAL, {"serviceAccount": "trainer_sa"}, "serviceAccount='trainer_sa'",
     ["DNS-1123"]),
    ("bucket name with google", MINIMAL, {"bucketName": "google-ckpt"}, "bucketName='google-ckpt'", ["google"]),
    ("bucket name with dots", MINIMAL, {"bucketName": "ckpt.example.com"}, "bucketName='ckpt.example.com'",
     ["no dots"]),
    ("bucket name too long", MINIMAL, {"bucketName": "b" * 64}, "bucketName='" + "b" * 64, ["3-63"]),
    ("soft delete 3 days", MINIMAL, {"softDeleteDays": 3}, "softDeleteDays=3", ["7-90"]),
    ("soft delete 91 days", MINIMAL, {"softDeleteDays": 91}, "softDeleteDays=91", ["7-90"]),
    ("mtu too large", {**MINIMAL, "dcn": True}, {"dcnMtu": 9000}, "dcnMtu=9000", ["1300-8896"]),
    ("train steps zero", MINIMAL, {"trainSteps": 0}, "trainSteps=0", ["at least 1"]),
    ("checkpoint period zero", MINIMAL, {"checkpointPeriod": 0}, "checkpointPeriod=0", ["at least 1"]),
    ("batch negative", MINIMAL, {"perDeviceBatchSize": "-1"}, "perDeviceBatchSize='-1'", ["positive"]),
    ("batch not a number", MINIMAL, {"perDeviceBatchSize": "lots"}, "perDeviceBatchSize='lots'", ["positive"]),
    ("max failures below -1", MINIMAL, {"maxFailures": -2}, "maxFailures=-2", ["-1 (retry forever)"]),
    ("pre-running deadline negative", MINIMAL, {"rayPreRunningDeadlineSeconds": -1},
     "rayPreRunningDeadlineSeconds=-1", ["0 (no limit) or 1 to 2147483647 seconds"]),
    ("pre-running deadline beyond int32", MINIMAL, {"rayPreRunningDeadlineSeconds": 2**31},
     "rayPreRunningDeadlineSeconds=2147483648", ["0 (no limit) or 1 to 2147483647 seconds"]),
    ("capacity wait negative", MINIMAL, {"capacityWaitSeconds": -1},
     "capacityWaitSeconds=-1", ["0 (no limit) or 1 to 2147483647 seconds"]),
    ("capacity wait and its older name differ", MINIMAL,
     {"capacityWaitSeconds": 1800, "rayPreRunningDeadlineSeconds": 900},
     "rayPreRunningDeadlineSeconds=900", ["the same value or unset"]),
    ("maxtext too old", MINIMAL, {"maxtextVersion": "0.2.1"}, "maxtextVersion='0.2.1'", ["0.2.2"]),
    ("ray image latest", MINIMAL, {"rayImage": "rayproject/ray:latest"}, "rayImage='rayproject/ray:latest'",
     ["pinned"]),
    ("ray cluster name too long", MINIMAL, {"rayClusterName": "r" * 54}, "rayClusterName='" + "r" * 54,
     ["at most 53"]),
    ("jobset name uppercase", JOBSET, {"jobsetName": "Train"}, "jobsetName='Train'", ["DNS-1035"]),
    ("array not a list", {**MINIMAL, "dcn": True}, {"dcnSubnets": "10.50.0.0/16"}, "dcnSubnets='10.50.0.0/16'",
     ["a list of strings"]),
]

GCP_FACTS = [
    # Zone x generation (Cloud TPU "TPU regions and zones", infra/config/tpu_zones.py).
    ("v6e where no TPU is offered", MINIMAL, {"zone": "europe-west1-b"}, "zone='europe-west1-b'",
     ["tpuGeneration='v6e'", "europe-west4-a", "tpuZoneCheck=false"]),
    ("v6e in a zone letter that does not exist", MINIMAL, {"zone": "us-east5-z"}, "zone='us-east5-z'",
     ["does not offer"]),
    ("v5e in a v6e-only zone", V5E, {"zone": "us-east1-d"}, "zone='us-east1-d'", ["tpuGeneration='v5e'",
                                                                                  "us-west4-a"]),
    ("v5p where only v5e is", V5P, {"zone": "us-west4-a"}, "zone='us-west4-a'", ["tpuGeneration='v5p'"]),
    ("v4 outside us-central2-b", V4, {"zone": "us-central1-a"}, "zone='us-central1-a'", ["us-central2-b"]),
    ("tpu7x in a v6e zone", TPU7X, {"zone": "us-east5-b"}, "zone='us-east5-b'", ["us-central1-c"]),
    ("v6e in a zone listed only as single-tenant", MINIMAL, {"zone": "us-east4-a"}, "zone='us-east4-a'",
     ["single-tenant", "tpuZoneCheck=false"]),
    ("v6e in a zone the table lacks", MINIMAL, {"zone": "asia-southeast1-b"}, "zone='asia-southeast1-b'",
     ["asia-northeast1-b"]),
    ("generation set, zone default-valid", MINIMAL, {"tpuGeneration": "v5p", "tpuTopology": "2x2x2",
                                                     "model": "qwen3-0.6b", "zone": "europe-west4-a"},
     "zone='europe-west4-a'", ["tpuGeneration='v5p'", "europe-west4-b"]),
    # Regions must exist.
    ("zone of no region", MINIMAL, {"zone": "mars-north1-a"}, "zone='mars-north1-a'", ["not a GCP region"]),
    ("region that does not exist", MINIMAL, {"zone": "us-east9-b", "region": "us-east9"}, "region='us-east9'",
     ["not a GCP region", "tpuZoneCheck=false"]),
    ("zone outside its region", MINIMAL, {"region": "us-east1"}, "zone='us-east5-b'", ["region='us-east1'"]),
    ("zone without its letter", MINIMAL, {"zone": "us-east5"}, "zone='us-east5'", ["us-east5-b"]),
    ("zone in capitals", MINIMAL, {"zone": "US-EAST5-B"}, "zone='US-EAST5-B'", ["us-east5-b"]),
    ("region malformed", MINIMAL, {"region": "useast5"}, "region='useast5'", ["us-east5"]),
    ("zone check off where the table agrees", MINIMAL, {"tpuZoneCheck": False}, "tpuZoneCheck=false",
     ["us-east5-b", "unset tpuZoneCheck"]),
    # Cloud Storage locations: region, dual-region or multi-region, never a zone.
    ("bucket in a zone", MINIMAL, {"bucketLocation": "us-east5-b"}, "bucketLocation='us-east5-b'",
     ["not a zone", "us-east5"]),
    ("bucket in an AI zone", MINIMAL, {"bucketLocation": "us-central1-ai1a"}, "bucketLocation='us-central1-ai1a'",
     ["not a zone"]),
    ("bucket nowhere", MINIMAL, {"bucketLocation": "moon"}, "bucketLocation='moon'", ["NAM4", "multi-region"]),
    ("bucket in an unknown region", MINIMAL, {"bucketLocation": "us-east9"}, "bucketLocation='us-east9'",
     ["Cloud Storage location"]),
    ("bucket in an unknown dual-region", MINIMAL, {"bucketLocation": "EUR3"}, "bucketLocation='EUR3'",
     ["EUR4"]),
    # CIDRs need an explicit prefix, private addresses, no host bits, no overlap.
    ("node range without prefix", MINIMAL, {"nodeCidr": "10.0.0.0"}, "nodeCidr='10.0.0.0'", ["/32"]),
    ("pod range without prefix", MINIMAL, {"podCidr": "10.4.0.0"}, "podCidr='10.4.0.0'", ["explicit prefix"]),
    ("service range without prefix", MINIMAL, {"serviceCidr": "10.8.0.0"}, "serviceCidr='10.8.0.0'",
     ["explicit prefix"]),
    ("dcn range without prefix", {**MINIMAL, "dcn": True}, {"dcnSubnets": ["10.50.0.0", "10.60.0.0/16"]},
     "dcnSubnets[0]='10.50.0.0'", ["explicit prefix"]),
    ("dashboard range without prefix", LB, {"dashboardSourceRanges": ["10.0.0.0"]},
     "dashboardSourceRanges[0]='10.0.0.0'", ["explicit prefix"]),
    ("dashboard range with host bits", LB, {"dashboardSourceRanges": ["10.0.0.1/8"]},
     "dashboardSourceRanges[0]='10.0.0.1/8'", ["10.0.0.0/8"]),
    ("public node range", MINIMAL, {"nodeCidr": "8.8.0.0/20"}, "nodeCidr='8.8.0.0/20'", ["private"]),
    ("node range with host bits", MINIMAL, {"nodeCidr": "10.0.0.1/20"}, "nodeCidr='10.0.0.1/20'", ["host bits"]),
    ("not an address at all", MINIMAL, {"serviceCidr": "ten/8"}, "serviceCidr='ten/8'", ["CIDR"]),
    ("pod range overlaps nodes", MINIMAL, {"podCidr": "10.0.0.0/14"}, "podCidr='10.0.0.0/14'",
     ["overlaps", "nodeCidr='10.0.0.0/20'"]),
    ("dcn ranges overlap", {**MINIMAL, "dcn": True}, {"dcnSubnets": ["10.50.0.0/16", "10.50.128.0/17"]},
     "dcnSubnets[1]='10.50.128.0/17'", ["overlaps"]),
    ("dcn on with no range", {**MINIMAL, "dcn": True}, {"dcnSubnets": []}, "dcnSubnets=[]", ["at least one"]),
    # Range sizes: nodes = system pool + slices x hosts; a /24 of the Pod range per node (110 Pods per node).
    ("node range too small", MINIMAL, {"nodeCidr": "10.0.0.0/29"}, "nodeCidr='10.0.0.0/29'",
     ["9 nodes", "1 system + 2 slices x 4 hosts", "/28"]),
    ("pod range too small", MINIMAL, {"podCidr": "10.4.0.0/22"}, "podCidr='10.4.0.0/22'",
     ["holds 4", "9 nodes", "/20"]),
    ("pod range of one node", MINIMAL, {"podCidr": "10.4.0.0/24"}, "podCidr='10.4.0.0/24'", ["holds 1"]),
    ("slices beyond the default pod range", MINIMAL, {"slices": 300}, "slices=300",
     ["1201 nodes", "default podCidr", "/13"]),
    ("system nodes beyond the default pod range", MINIMAL, {"systemPoolNodes": 1020}, "systemPoolNodes=1020",
     ["1028 nodes", "/13"]),
    ("big slices, small node range", MINIMAL, {"nodeCidr": "10.0.0.0/27", "tpuTopology": "8x8"},
     "nodeCidr='10.0.0.0/27'", ["33 nodes"]),
    # Autopilot needs a release channel.
    ("autopilot without a release channel", AUTOPILOT, {"releaseChannel": "UNSPECIFIED"},
     "releaseChannel='UNSPECIFIED'", ["clusterMode='autopilot'", "always enrolled"]),
    # Reservation and machine-type names.
    ("reservation with underscore", MINIMAL, {"capacity": "reservation", "reservationName": "Res_1"},
     "reservationName='Res_1'", ["RFC 1035"]),
    ("reservation starting with a digit", MINIMAL, {"capacity": "reservation", "reservationName": "1res"},
     "reservationName='1res'", ["RFC 1035"]),
    ("reservation too long", MINIMAL, {"capacity": "reservation", "reservationName": "r" * 64},
     "reservationName='" + "r" * 64, ["1-63"]),
    ("shared reservation with a bad project", MINIMAL,
     {"capacity": "reservation", "reservationName": "projects/p/reservations/r"},
     "reservationName='projects/p/reservations/r'", ["projects/PROJECT/reservations/NAME"]),
    ("system machine type in capitals", MINIMAL, {"systemPoolMachineType": "E2-STANDARD-16"},
     "systemPoolMachineType='E2-STANDARD-16'", ["machine type"]),
    ("system machine type with underscores", MINIMAL, {"systemPoolMachineType": "e2_standard_16"},
     "systemPoolMachineType='e2_standard_16'", ["e2-standard-16"]),
    ("system machine type without family", MINIMAL, {"systemPoolMachineType": "standard"},
     "systemPoolMachineType='standard'", ["machine type"]),
    ("TPU machine type with a space", MINIMAL, {"tpuMachineType": "ct6e standard 4t"},
     "tpuMachineType='ct6e standard 4t'", ["ct6e-standard-4t"]),
    ("TPU machine type in capitals", MINIMAL, {"tpuMachineType": "CT6E-STANDARD-4T"},
     "tpuMachineType='CT6E-STANDARD-4T'", ["machine type"]),
    ("TPU machine type of another generation", MINIMAL, {"tpuMachineType": "ct5lp-hightpu-4t"},
     "tpuMachineType='ct5lp-hightpu-4t'", ["ct6e-standard-4t"]),
]

_RAY_ONLY = {"elasticMinSlices": 1, "maxFailures": 2, "rayImage": "rayproject/ray:2.60.0-py312",
             "rayClusterName": "maxtext", "rayJobName": "train", "dashboardExposure": "internal-lb",
             "dashboardSourceRanges": ["10.0.0.0/8"], "rayPreRunningDeadlineSeconds": 600}
_PATHWAYS_ONLY = {"pathwaysJobName": "mine", "pathwaysElasticSlices": 1, "pathwaysMaxSliceRestarts": 3,
                  "pathwaysElasticMaxRetries": 2, "pathwaysElasticTimeoutSeconds": 60, "pathwaysProfiling": True,
                  "pathwaysServerImage": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.2",
                  "pathwaysProxyImage": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.10.2",
                  "pathwaysTrainerImage": "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_pre_training:0.2.4"}
_JOBSET_ONLY = {"jobsetImage": "python:3.12.11-slim-bookworm", "jobsetName": "mine", "kueueTpuQuota": 64}


def _named(key: str, value) -> str:
    if isinstance(value, bool):
        return f"{key}={str(value).lower()}"
    return f"{key}={value!r}" if isinstance(value, (str, list)) else f"{key}={value}"


DOES_NOTHING = (
    [(f"{key} on jobset", JOBSET, {key: value}, _named(key, value), ["workloadBackend='jobset'", "rayjob"])
     for key, value in _RAY_ONLY.items()]
    + [(f"{key} on pathways", PATHWAYS, {key: value}, _named(key, value), ["workloadBackend='pathways'"])
       for key, value in _RAY_ONLY.items()]
    + [(f"{key} on rayjob", MINIMAL, {key: value}, _named(key, value), ["the default tpu-multislice:workloadBackend",
                                                                        "workloadBackend=pathways"])
       for key, value in _PATHWAYS_ONLY.items()]
    + [(f"{key} on jobset", JOBSET, {key: value}, _named(key, value), ["workloadBackend='jobset'"])
       for key, value in _PATHWAYS_ONLY.items()]
    + [(f"{key} on rayjob", MINIMAL, {key: value}, _named(key, value), ["workloadBackend=jobset"])
       for key, value in _JOBSET_ONLY.items()]
    + [(f"{key} on pathways", PATHWAYS, {key: value}, _named(key, value), ["workloadBackend='pathways'"])
       for key, value in _JOBSET_ONLY.items()]
    + [
        ("maxRestarts on rayjob", MINIMAL, {"maxRestarts": 5}, "maxRestarts=5", ["maxFailures"]),
        ("maxtextVersion on pathways", PATHWAYS, {"maxtextVersion": "0.2.5"}, "maxtextVersion='0.2.5'",
         ["pathwaysTrainerImage"]),
        ("workerEnvironment image on pathways", PATHWAYS, {"workerEnvironment": "image"},
         "workerEnvironment='image'", ["pathwaysTrainerImage"]),
        ("workerEnvironment runtime on pathways", PATHWAYS, {"workerEnvironment": "runtime"},
         "workerEnvironment='runtime'", ["workloadBackend='pathways'"]),
        # The default built image runs instead of the runtime install's images.
        ("rayImage with the built image", MINIMAL, {"rayImage": "rayproject/ray:2.60.0-py311"},
         "rayImage='rayproject/ray:2.60.0-py311'", ["workerEnvironment='image'", "workerEnvironment=runtime"]),
        ("jobsetImage with the built image", JOBSET, {"jobsetImage": "python:3.12.11-slim-bookworm"},
         "jobsetImage='python:3.12.11-slim-bookworm'", ["workerEnvironment=runtime"]),
        ("imageBuilder on the runtime path", MINIMAL, {"workerEnvironment": "runtime", "imageBuilder": "docker"},
         "imageBuilder='docker'", ["workerEnvironment=runtime builds none"]),
        ("imageBuilder on pathways", PATHWAYS, {"imageBuilder": "cloud-build"},
         "imageBuilder='cloud-build'", ["workloadBackend='pathways'"]),
        ("smoke test on pathways", PATHWAYS, {"smokeTest": True}, "smokeTest=true", ["no smoke job"]),
        ("DCN ranges without dcn", MINIMAL, {"dcnSubnets": ["10.70.0.0/16"]}, "dcnSubnets=['10.70.0.0/16']",
         ["dcn=false", "dcn=true"]),
        ("DCN MTU without dcn", MINIMAL, {"dcnMtu": 1500}, "dcnMtu=1500", ["the default tpu-multislice:dcn=false"]),
        ("DCN MTU with dcn off", MINIMAL, {"dcn": False, "dcnMtu": 1500}, "dcnMtu=1500", ["with tpu-multislice:dcn=false:"]),
        ("DRANET without dcn", MINIMAL, {"dranet": True}, "dranet=true", ["dcn=true"]),
        ("dashboard ranges on cluster-ip", MINIMAL, {"dashboardSourceRanges": ["10.0.0.0/8"]},
         "dashboardSourceRanges=['10.0.0.0/8']", ["dashboardExposure='cluster-ip'", "internal-lb"]),
        ("reservation name with spot", MINIMAL, {"capacity": "spot", "reservationName": "r1"},
         "reservationName='r1'", ["capacity='spot'"]),
        ("reservation name on demand", MINIMAL, {"reservationName": "r1"}, "reservationName='r1'",
         ["capacity='on-demand'"]),
        ("system machine type on autopilot", AUTOPILOT, {"systemPoolMachineType": "e2-standard-8"},
         "systemPoolMachineType='e2-standard-8'", ["clusterMode='autopilot'"]),
        ("system nodes on autopilot", AUTOPILOT, {"systemPoolNodes": 2}, "systemPoolNodes=2",
         ["clusterMode='autopilot'"]),
        ("TPU machine type on autopilot", AUTOPILOT, {"tpuMachineType": "ct6e-standard-4t"},
         "tpuMachineType='ct6e-standard-4t'", ["clusterMode='autopilot'"]),
        ("DCN on autopilot", AUTOPILOT, {"dcn": True}, "dcn=true", ["clusterMode='autopilot'"]),
    ]
)

MESSAGES = [
    # A single-host machine type with the default (multi-host) topology blames the machine type.
    ("8-chip v6e machine, default topology", MINIMAL, {"tpuMachineType": "ct6e-standard-8t"},
     "tpuMachineType='ct6e-standard-8t'", ["the default tpu-multislice:tpuTopology='4x4'", "2x4",
                                           "ct6e-standard-4t"]),
    ("1-chip v6e machine, default topology", MINIMAL, {"tpuMachineType": "ct6e-standard-1t"},
     "tpuMachineType='ct6e-standard-1t'", ["1x1"]),
    ("8-chip v5e machine, default topology", V5E, {"tpuMachineType": "ct5lp-hightpu-8t"},
     "tpuMachineType='ct5lp-hightpu-8t'", ["ct5lp-hightpu-4t"]),
    ("1-chip v5e machine, default topology", V5E, {"tpuMachineType": "ct5lp-hightpu-1t"},
     "tpuMachineType='ct5lp-hightpu-1t'", ["1x1"]),
    # Both set: the topology the user chose is what the machine cannot serve.
    ("machine and topology both set", MINIMAL, {"tpuMachineType": "ct6e-standard-8t", "tpuTopology": "4x4"},
     "tpuTopology='4x4'", ["tpuMachineType='ct6e-standard-8t'", "v6e", "2x4"]),
    # Single-host topology with the default slices blames the topology; with slices set, slices.
    ("single-host topology, default slices", MINIMAL, {"tpuTopology": "2x2"}, "tpuTopology='2x2'",
     ["single-host", "default slices=2", "4x4"]),
    ("single-host machine and topology, default slices", SMALL,
     {"tpuMachineType": "ct6e-standard-8t", "tpuTopology": "2x4"}, "tpuTopology='2x4'", ["single-host"]),
    ("single-host topology, slices set", MINIMAL, {"tpuTopology": "2x2", "slices": 3}, "slices=3",
     ["single-host", "tpuTopology='2x2'"]),
    # One mistake, one line: no follow-on lines from rules that read the refused value.
    ("malformed dcn with dranet", MINIMAL, {"dcn": "yes", "dranet": True}, "dcn='yes'", ["true or false"]),
    ("malformed dcn with DCN keys", MINIMAL, {"dcn": "on", "dcnMtu": 1500, "dcnSubnets": ["10.70.0.0/16"]},
     "dcn='on'", ["true or false"]),
    ("malformed cluster name, derived bucket", MINIMAL, {"clusterName": "Bad_Name"}, "clusterName='Bad_Name'",
     ["lowercase"]),
    ("malformed project, derived bucket", MINIMAL, {"project": "X"}, "project='X'", ["6-30"]),
    ("malformed DCN ranges with dcn on", {**MINIMAL, "dcn": True}, {"dcnSubnets": "not json"},
     "dcnSubnets='not json'", ["a list of strings"]),
    ("malformed dashboard ranges with internal-lb", LB, {"dashboardSourceRanges": "10.0.0.0/8"},
     "dashboardSourceRanges='10.0.0.0/8'", ["a list of strings"]),
    ("malformed generation with a topology", MINIMAL, {"tpuGeneration": "v9", "tpuTopology": "2x2x2"},
     "tpuGeneration='v9'", ["allowed"]),
    ("malformed backend with Pathways keys", MINIMAL, {"workloadBackend": "pathway", "pathwaysElasticSlices": 1},
     "workloadBackend='pathway'", ["allowed"]),
    ("malformed mode with pool keys", MINIMAL, {"clusterMode": "auto", "systemPoolNodes": 2}, "clusterMode='auto'",
     ["allowed"]),
    ("malformed capacity with a reservation", MINIMAL, {"capacity": "reserved", "reservationName": "r1"},
     "capacity='reserved'", ["allowed"]),
    ("malformed reservation with capacity reservation", MINIMAL,
     {"capacity": "reservation", "reservationName": "R1"}, "reservationName='R1'", ["RFC 1035"]),
    ("malformed train steps with a period", MINIMAL, {"trainSteps": "many", "checkpointPeriod": 10},
     "trainSteps='many'", ["integer"]),
    ("malformed zone check with a bad zone", MINIMAL, {"tpuZoneCheck": "no", "zone": "europe-west1-b"},
     "tpuZoneCheck='no'", ["true or false"]),
    ("malformed zone with a generation", V5P, {"zone": "nowhere"}, "zone='nowhere'",
     ["us-east5-b"]),
    ("malformed region", MINIMAL, {"region": "US-EAST5"}, "region='US-EAST5'", ["us-east5"]),
    ("malformed TPU machine type on autopilot", AUTOPILOT, {"tpuMachineType": "CT6E"}, "tpuMachineType='CT6E'",
     ["machine type"]),
    ("elasticMinSlices on pathways, planner silent", PATHWAYS, {"elasticMinSlices": 5}, "elasticMinSlices=5",
     ["pathwaysElasticSlices"]),
    ("DRANET without dcn on a non-DRANET machine", V5E, {"dranet": True}, "dranet=true", ["dcn=true"]),
    ("DRANET without dcn on pathways", PATHWAYS, {"dranet": True}, "dranet=true", ["dcn=true"]),
    ("internal-lb on jobset, no follow-on", JOBSET, {"dashboardExposure": "internal-lb"},
     "dashboardExposure='internal-lb'", ["workloadBackend='jobset'"]),
    # Batch refusals name perDeviceBatchSize when the user set it.
    ("fractional batch", MINIMAL, {"perDeviceBatchSize": "0.5"}, "perDeviceBatchSize='0.5'",
     ["does not divide", "v6e-16"]),
    ("fractional batch on v5e", V5E, {"perDeviceBatchSize": "1.5"}, "perDeviceBatchSize='1.5'",
     ["does not divide"]),
    ("batch too large for HBM", MINIMAL, {"perDeviceBatchSize": "64"}, "perDeviceBatchSize='64'",
     ["does not fit"]),
]

CROSS_KEY = [
    ("reservation without a name", MINIMAL, {"capacity": "reservation"}, "capacity='reservation'",
     ["reservationName"]),
    ("flex-start on v4", V4, {"capacity": "flex-start"}, "capacity='flex-start'", ["tpuGeneration='v4'"]),
    ("DRANET on v5e", V5E, {"dcn": True, "dranet": True}, "dranet=true", ["tpuGeneration='v5e'"]),
    ("gke version below the generation floor", MINIMAL, {"gkeVersion": "1.30.5-gke.100"},
     "gkeVersion='1.30.5-gke.100'", ["tpuGeneration=v6e"]),
    ("gke version malformed", MINIMAL, {"gkeVersion": "latest"}, "gkeVersion='latest'", ["1.34"]),
    ("checkpoint period beyond the run", MINIMAL, {"checkpointPeriod": 500}, "checkpointPeriod=500",
     ["trainSteps=200"]),
    ("checkpoint period beyond a short run", MINIMAL, {"trainSteps": 10, "checkpointPeriod": 50},
     "checkpointPeriod=50", ["trainSteps=10"]),
    ("internal-lb without ranges", MINIMAL, {"dashboardExposure": "internal-lb"}, "dashboardExposure='internal-lb'",
     ["dashboardSourceRanges"]),
    ("model unknown", MINIMAL, {"model": "gpt-5"}, "model='gpt-5'", ["llama3-8b"]),
    ("model for CPU only", MINIMAL, {"model": "tiny"}, "model='tiny'", ["allowed"]),
    ("elastic minimum above slices", MINIMAL, {"elasticMinSlices": 3}, "elasticMinSlices=3", ["1 to slices=2"]),
    ("70B on one slice", MINIMAL, {"model": "llama3-70b", "slices": 1}, "model='llama3-70b'", ["does not fit"]),
    ("Kueue quota below the workload", JOBSET, {"kueueTpuQuota": 31}, "kueueTpuQuota=31", ["at least 32"]),
    ("Pathways elastic slices not below slices", PATHWAYS, {"pathwaysElasticSlices": 2},
     "pathwaysElasticSlices=2", ["slices=2"]),
    ("Pathways head on a small machine", PATHWAYS, {"systemPoolMachineType": "e2-standard-16"},
     "systemPoolMachineType='e2-standard-16'", ["Pathways head"]),
    ("Pathways on a machine it lacks", {**PATHWAYS, **V5E}, {"tpuTopology": "1x1", "slices": 1},
     "tpuGeneration='v5e'", ["ct5lp-hightpu-1t", "not supported by Pathways"]),
    ("planner: topology too small for the model", MINIMAL, {"tpuTopology": "2x2", "slices": 1}, "slices=1",
     ["llama3-8b does not fit on 1 x v6e-4"]),
    ("Pathways proxy of another release", PATHWAYS,
     {"pathwaysProxyImage": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.9.2"},
     "pathwaysProxyImage", ["JAX 0.9.2", "JAX 0.10.2, the default"]),
    ("Ray image of another Python", {**MINIMAL, "workerEnvironment": "runtime"},
     {"rayImage": "rayproject/ray:2.60.0-py311"},
     "rayImage='rayproject/ray:2.60.0-py311'", ["Python 3.12"]),
    ("maxtext other than the lock's", MINIMAL, {"maxtextVersion": "0.2.4"}, "maxtextVersion='0.2.4'", ["0.2.5"]),
    # GKE flex-start: capacity is obtained per request (at most 7 days) and cannot be held idle
    # (https://cloud.google.com/kubernetes-engine/docs/concepts/flex-start-vms).
    ("warm slices on flex-start", MINIMAL, {"capacity": "flex-start", "warmSlices": 1}, "warmSlices=1",
     ["capacity='flex-start'"]),
    # A warm pool holds one whole slice: more warm pools than slices cannot exist.
    ("more warm slices than slices", MINIMAL, {"warmSlices": 3}, "warmSlices=3", ["slices=2", "0..2"]),
]

CLASSES = {"values": VALUES, "gcp-facts": GCP_FACTS, "does-nothing": DOES_NOTHING, "messages": MESSAGES,
           "cross-key": CROSS_KEY}
REFUSED = [(f"{name}: {case}", base, overrides, named, words)
           for name, cases in CLASSES.items() for case, base, overrides, named, words in cases]


def _raw(base: dict, overrides: dict) -> dict:
    return {**base, **overrides}


def _problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as error:
        build(raw)
    return error.value.problems


@pytest.mark.parametrize("base,overrides,named,words", [case[1:] for case in REFUSED],
                         ids=[case[0] for case in REFUSED])
def test_every_wrong_config_is_refused_in_one_line_naming_the_key_and_value(base, overrides, named, words):
    problems = _problems(_raw(base, overrides))
    assert len(problems) == 1, problems
    [line] = problems
    key = named.split("=")[0].split("[")[0]
    assert f"{NAMESPACE}:{key}" in line, line
    assert named in line, line
    for word in words:
        assert word in line, (word, line)
    # One refusal; a long one may go on over indented lines (each within 100 columns), its first line names the key.
    first, *more = line.split("\n")
    assert f"{NAMESPACE}:{key}" in first and "Traceback" not in line
    assert all(part.startswith("    ") and (len(part) <= 100 or part.strip().startswith("python -m "))
               for part in more), line      # a command to copy whole may be longer


def test_the_catalogue_is_large_and_covers_every_class():
    sizes = {name: len(cases) for name, cases in CLASSES.items()}
    assert sum(sizes.values()) > 150 and min(sizes.values()) >= 19, sizes
    assert len({case[0] for case in REFUSED}) == len(REFUSED), "case ids must be unique"


def test_several_mistakes_give_one_line_each():
    problems = _problems(_raw(MINIMAL, {"slices": 0, "capacity": "reservation", "namespace": "BAD",
                                        "bucketLocation": "us-east5-b", "maxRestarts": 1}))
    assert len(problems) == 5, problems


def test_a_key_is_refused_only_when_the_user_sets_it_never_for_its_default():
    # Every backend and mode with nothing else set builds: defaults of keys it does not read are not refused.
    for raw in (MINIMAL, JOBSET, PATHWAYS, AUTOPILOT, {**MINIMAL, "dcn": True}):
        build(raw)


# A representative refusal per class runs the whole program, the way `pulumi up` would.
UNDER_PULUMI = [
    "values: slices not an integer", "values: cluster name uppercase", "values: unknown key, close match",
    "gcp-facts: v6e where no TPU is offered", "gcp-facts: zone of no region", "gcp-facts: bucket in a zone",
    "gcp-facts: node range without prefix", "gcp-facts: pod range too small",
    "gcp-facts: autopilot without a release channel", "gcp-facts: reservation with underscore",
    "does-nothing: maxFailures on jobset", "does-nothing: pathwaysElasticSlices on rayjob",
    "does-nothing: DCN MTU without dcn", "messages: 8-chip v6e machine, default topology",
    "messages: malformed dcn with dranet", "messages: fractional batch", "cross-key: Kueue quota below the workload",
]
_BY_ID = {case[0]: case for case in REFUSED}


@pytest.mark.parametrize("case_id", UNDER_PULUMI)
def test_refusals_under_pulumi_register_nothing_and_show_no_traceback(case_id):
    _, base, overrides, named, _ = _BY_ID[case_id]
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(pulumi.RunError) as error:
        run_program(_raw(base, overrides), stack="catalogue", monitor=monitor)
    assert [r.type for r in monitor.registrations if r.custom] == []
    message = str(error.value)
    assert named in message and "Traceback" not in message
    # RunError is the Pulumi exception whose message is shown without a stack trace.
    assert error.value.__cause__ is None and error.value.__suppress_context__


# (case id, base, overrides, attribute path on StackConfig → the value it must derive)
VALID = [
    # Defaults yield to what the user set.
    ("short run: the checkpoint period follows trainSteps", MINIMAL, {"trainSteps": 10},
     {"workload.checkpoint_period": 10}),
    ("one-step run", MINIMAL, {"trainSteps": 1}, {"workload.checkpoint_period": 1}),
    ("run just below the default period", MINIMAL, {"trainSteps": 49}, {"workload.checkpoint_period": 49}),
    ("default run keeps the default period", MINIMAL, {}, {"workload.checkpoint_period": 50}),
    ("a period the user set is kept", MINIMAL, {"trainSteps": 10, "checkpointPeriod": 5},
     {"workload.checkpoint_period": 5}),
    # Idle TPU pools scale to zero unless asked; a reservation is paid for anyway and stays warm by default.
    ("on-demand slices scale to zero", MINIMAL, {}, {"tpu.warm_slices": 0}),
    ("spot slices scale to zero", MINIMAL, {"capacity": "spot"}, {"tpu.warm_slices": 0}),
    ("a reservation stays warm", MINIMAL, {"capacity": "reservation", "reservationName": "r1"},
     {"tpu.warm_slices": 2}),
    ("a reservation may scale to zero", MINIMAL, {"capacity": "reservation", "reservationName": "r1",
                                                  "warmSlices": 0}, {"tpu.warm_slices": 0}),
    ("checkpoints kept by default", MINIMAL, {}, {"workload.checkpoints_to_keep": 3}),
    ("more checkpoints kept", MINIMAL, {"checkpointsToKeep": 10}, {"workload.checkpoints_to_keep": 10}),
    ("one warm slice for interactive work", MINIMAL, {"capacity": "spot", "warmSlices": 1}, {"tpu.warm_slices": 1}),
    ("flex-start with no warm slice", MINIMAL, {"capacity": "flex-start", "warmSlices": 0}, {"tpu.warm_slices": 0}),
    ("new pathways stack gets a head-sized CPU pool", PATHWAYS, {},
     {"cluster.system_pool_machine_type": "n2-standard-64"}),
    ("ray stack keeps the small CPU pool", MINIMAL, {}, {"cluster.system_pool_machine_type": "e2-standard-16"}),
    ("jobset stack keeps the small CPU pool", JOBSET, {}, {"cluster.system_pool_machine_type": "e2-standard-16"}),
    ("pathways with a larger machine", PATHWAYS, {"systemPoolMachineType": "n2-highmem-64"},
     {"cluster.system_pool_machine_type": "n2-highmem-64"}),
    ("whole per-device batch", MINIMAL, {"perDeviceBatchSize": "1"}, {"workload.plan.per_device_batch_size": 1}),
    ("batch of two", SMALL, {"perDeviceBatchSize": "2"}, {"workload.plan.per_device_batch_size": 2}),
    # Zones the table lists, AI zones, and zones beyond the table with tpuZoneCheck=false.
    ("v6e in Europe", MINIMAL, {"zone": "europe-west4-a"}, {"gcp.region": "europe-west4"}),
    ("v6e in Asia", MINIMAL, {"zone": "asia-northeast1-b"}, {"gcp.region": "asia-northeast1"}),
    ("v6e in an AI zone", MINIMAL, {"zone": "us-south1-ai1b"}, {"gcp.region": "us-south1"}),
    ("v6e single-tenant zone with the table check off", MINIMAL, {"zone": "us-east4-a", "tpuZoneCheck": False},
     {"gcp.zone": "us-east4-a"}),
    ("tpu7x in its zone", TPU7X, {}, {"tpu.shape.machine.name": "tpu7x-standard-4t"}),
    ("tpu7x in an AI zone", TPU7X, {"zone": "us-central1-ai1a"}, {"gcp.region": "us-central1"}),
    ("v5e in the US", V5E, {}, {"tpu.shape.pod_type": "v5litepod-16"}),
    ("v5e in Europe", V5E, {"zone": "europe-west4-b"}, {"gcp.region": "europe-west4"}),
    ("v5e in Asia", V5E, {"zone": "asia-southeast1-b"}, {"gcp.region": "asia-southeast1"}),
    ("v5p in its zone", V5P, {}, {"tpu.shape.pod_type": "v5p-16"}),
    ("v5p in Europe", V5P, {"zone": "europe-west4-b"}, {"gcp.zone": "europe-west4-b"}),
    ("v4 in us-central2-b", V4, {}, {"gcp.region": "us-central2"}),
    ("v4 on flex-start is refused, on spot it is fine", V4, {"capacity": "spot"}, {"tpu.capacity.value": "spot"}),
    ("a zone newer than the table", MINIMAL, {"zone": "us-central1-a", "tpuZoneCheck": False},
     {"gcp.zone": "us-central1-a"}),
    ("a region newer than the table", MINIMAL, {"zone": "us-east7-ai1b", "tpuZoneCheck": False},
     {"gcp.region": "us-east7"}),
    ("region set to the zone's", MINIMAL, {"region": "us-east5"}, {"gcp.region": "us-east5"}),
    # Bucket locations.
    ("bucket in the US multi-region", MINIMAL, {"bucketLocation": "US"}, {"storage.location": "US"}),
    ("bucket in the EU multi-region, lowercase", MINIMAL, {"bucketLocation": "eu"}, {"storage.location": "eu"}),
    ("bucket in a dual-region", MINIMAL, {"bucketLocation": "NAM4"}, {"storage.location": "NAM4"}),
    ("bucket in another region", MINIMAL, {"bucketLocation": "us-central1"}, {"storage.location": "us-central1"}),
    ("bucket region in capitals", MINIMAL, {"bucketLocation": "US-EAST5"}, {"storage.location": "US-EAST5"}),
    ("bucket defaults to the region", MINIMAL, {}, {"storage.location": "us-east5"}),
    # Ranges exactly large enough.
    ("pod range of exactly 16 nodes", MINIMAL, {"podCidr": "10.4.0.0/20"}, {"network.pod_cidr": "10.4.0.0/20"}),
    ("node range of 12 usable addresses", MINIMAL, {"nodeCidr": "10.0.0.0/28"}, {"network.node_cidr": "10.0.0.0/28"}),
    ("many slices with a big pod range", MINIMAL, {"slices": 300, "podCidr": "10.128.0.0/10"},
     {"tpu.total_hosts": 1200}),
    ("other private ranges", MINIMAL, {"nodeCidr": "192.168.0.0/24", "podCidr": "172.16.0.0/16",
                                       "serviceCidr": "172.17.0.0/20"}, {"network.service_cidr": "172.17.0.0/20"}),
    ("dcn with its own ranges and MTU", MINIMAL, {"dcn": True, "dcnMtu": 1460, "dcnSubnets": ["10.70.0.0/16"]},
     {"network.dcn_subnets": ("10.70.0.0/16",)}),
    ("dcn and DRANET", MINIMAL, {"dcn": True, "dranet": True}, {"network.dranet": True}),
    # Reservations and machine types that are well formed.
    ("reservation by name", MINIMAL, {"capacity": "reservation", "reservationName": "tpu-res"},
     {"tpu.reservation_name": "tpu-res"}),
    ("shared reservation", MINIMAL,
     {"capacity": "reservation", "reservationName": "projects/other-project/reservations/tpu-res"},
     {"tpu.reservation_name": "projects/other-project/reservations/tpu-res"}),
    ("reservation block", MINIMAL, {"capacity": "reservation", "reservationName": "tpu-res/reservationBlocks/b-1"},
     {"tpu.reservation_name": "tpu-res/reservationBlocks/b-1"}),
    ("custom CPU machine type", MINIMAL, {"systemPoolMachineType": "n2-custom-8-16384"},
     {"cluster.system_pool_machine_type": "n2-custom-8-16384"}),
    ("TPU machine type named explicitly", MINIMAL, {"tpuMachineType": "ct6e-standard-4t"},
     {"tpu.shape.hosts": 4}),
    ("single-host machine, topology and one slice", SMALL,
     {"tpuMachineType": "ct6e-standard-8t", "tpuTopology": "2x4", "slices": 1}, {"tpu.shape.hosts": 1}),
    ("single-host topology on one slice", SMALL, {"tpuTopology": "2x2", "slices": 1}, {"tpu.total_chips": 4}),
    # Modes, backends, and keys set where they apply (or set to what asks for nothing).
    ("autopilot on a release channel", AUTOPILOT, {"releaseChannel": "STABLE"}, {"cluster.release_channel": "STABLE"}),
    ("standard without a release channel", MINIMAL, {"releaseChannel": "UNSPECIFIED"},
     {"cluster.release_channel": "UNSPECIFIED"}),
    ("internal load balancer with ranges", LB, {}, {"ray.dashboard_source_ranges": ("10.0.0.0/8",)}),
    ("Ray keys on rayjob", MINIMAL, {"maxFailures": 5, "rayJobName": "train", "elasticMinSlices": 1},
     {"ray.max_failures": 5}),
    ("JobSet keys on jobset", JOBSET, {"maxRestarts": 1, "kueueTpuQuota": 64, "jobsetName": "train"},
     {"jobset.tpu_quota": 64}),
    ("Pathways keys on pathways", PATHWAYS, {"pathwaysElasticSlices": 1, "maxRestarts": 2},
     {"pathways.elastic_slices": 1}),
    ("smoke test off on pathways asks for nothing", PATHWAYS, {"smokeTest": False}, {"workload.smoke_test": False}),
    ("DRANET off without dcn asks for nothing", MINIMAL, {"dranet": False}, {"network.dranet": False}),
    ("empty dashboard ranges on jobset ask for nothing", JOBSET, {"dashboardSourceRanges": []},
     {"workload.backend": "jobset"}),
    ("empty reservation name on spot asks for nothing", MINIMAL, {"capacity": "spot", "reservationName": ""},
     {"tpu.reservation_name": ""}),
    ("maxtext and worker image on jobset", JOBSET, {"maxtextVersion": "0.2.5", "workerEnvironment": "image"},
     {"workload.worker_environment": "image"}),
    ("values given as Pulumi strings", MINIMAL, {"slices": "4", "dcn": "true", "dcnSubnets": '["10.50.0.0/16"]'},
     {"tpu.slices": 4}),
] + [(f"committed stack {stack}", load_stack_config(stack, REPO), {}, {}) for stack in COMMITTED_STACKS]


def _attribute(config, path: str):
    value = config
    for part in path.split("."):
        value = getattr(value, part)
    return value


@pytest.mark.parametrize("base,overrides,expected", [case[1:] for case in VALID], ids=[case[0] for case in VALID])
def test_every_valid_config_is_accepted(base, overrides, expected):
    config = build(_raw(base, overrides))
    for path, value in expected.items():
        assert _attribute(config, path) == value, path


RENDERED = ["short run: the checkpoint period follows trainSteps", "new pathways stack gets a head-sized CPU pool",
            "tpu7x in an AI zone", "a zone newer than the table", "bucket in a dual-region",
            "shared reservation", "autopilot on a release channel", "JobSet keys on jobset"]
_VALID_BY_ID = {case[0]: case for case in VALID}


@pytest.mark.parametrize("case_id", RENDERED)
def test_valid_configs_render_under_pulumi(case_id):
    _, base, overrides, _ = _VALID_BY_ID[case_id]
    run = run_program(_raw(base, overrides), stack="catalogue")
    assert any(r.type == "gcp:container/cluster:Cluster" for r in run.resources)
    assert run.outputs["totalChips"] > 0
