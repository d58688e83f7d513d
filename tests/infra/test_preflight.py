"""What the program reads from Google Cloud before it registers anything (infra/preflight.py), on a fresh project, a
first `pulumi up` and a later one.

Sources:
- terraform-provider-google `data_source_google_container_engine_versions.go`: getServerConfig, which fails
  SERVICE_DISABLED until container.googleapis.com is on; `release_channel_latest_version` is the first of each
  channel's validVersions.
- terraform-provider-google `resource_google_project_service.go`: reading a project service calls the Resource
  Manager's Projects.Get, so cloudresourcemanager.googleapis.com must be on before the stack can enable anything.
- The error texts of a disabled API: "... API has not been used in project N before or it is disabled ...
  accessNotConfigured" (banzaicloud/cloudinfo#378); reason SERVICE_DISABLED.
- GKE "About release channels" (https://cloud.google.com/kubernetes-engine/docs/concepts/release-channels): a cluster
  enrolled in a channel is created at a version that channel offers.
"""
from __future__ import annotations

import logging

import pytest

from preview import harness
from preview.harness import GcpMocks, RecordingMonitor, run_program
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO

CLUSTER = "gcp:container/cluster:Cluster"
DISABLED_CONTAINER = (
    "Error retrieving available container cluster versions: googleapi: Error 403: Kubernetes Engine API has not been "
    "used in project 123456789012 before or it is disabled. Enable it by visiting https://console.developers.google.com"
    "/apis/api/container.googleapis.com/overview?project=123456789012 then retry. If you enabled this API recently, "
    "wait a few minutes for the action to propagate to our systems and retry.\nDetails:\n[{\"reason\": "
    "\"SERVICE_DISABLED\"}], accessNotConfigured")
DISABLED_CRM = (
    "googleapi: Error 403: Cloud Resource Manager API has not been used in project 123456789012 before or it is "
    "disabled. Enable it by visiting https://console.developers.google.com/apis/api/cloudresourcemanager.googleapis.com"
    "/overview?project=123456789012 then retry., accessNotConfigured")
ENABLE = ("gcloud services enable cloudresourcemanager.googleapis.com container.googleapis.com "
          "--project my-tpu-project")


class FailingMocks(GcpMocks):
    """The provider's answer when an invoke fails: a failure carrying the API's error text."""

    def __init__(self, token: str, message: str):
        self.token, self.message = token, message

    def call(self, args):
        if args.token == self.token:
            return {}, [("", self.message)]
        return super().call(args)


@pytest.mark.parametrize("token,message", [
    (harness.ENGINE_VERSIONS_TOKEN, DISABLED_CONTAINER),
    ("gcp:organizations/getProject:getProject", DISABLED_CRM),
])
def test_a_fresh_project_is_refused_in_one_line_naming_the_command_before_anything_exists(token, message):
    monitor = RecordingMonitor(FailingMocks(token, message))
    with pytest.raises(Exception) as error:
        run_program(MINIMAL, stack="fresh", monitor=monitor)
    assert type(error.value).__name__ == "RunError"
    text = str(error.value)
    assert "\n" not in text and ENABLE in text and "(then pulumi up again)" in text
    assert [r.type for r in monitor.registrations if r.custom] == []


def test_other_lookup_errors_are_not_mistaken_for_a_disabled_api():
    monitor = RecordingMonitor(FailingMocks(harness.ENGINE_VERSIONS_TOKEN, "googleapi: Error 500: backend error"))
    with pytest.raises(Exception) as error:
        run_program(MINIMAL, stack="fresh", monitor=monitor)
    assert "gcloud services enable" not in str(error.value) and "backend error" in str(error.value)


def test_the_project_number_comes_from_the_lookup_made_before_anything_is_registered():
    run = run_program(MINIMAL, stack="number")
    member = run.one("gcp:storage/bucketIAMMember:BucketIAMMember", "checkpoints-object-user").inputs["member"]
    assert member.startswith(f"principal://iam.googleapis.com/projects/{harness.FAKE_PROJECT_NUMBER}/")


# ---- gkeVersion against the chosen channel ------------------------------------------------------------------------

def test_a_version_only_a_faster_channel_offers_is_refused_for_the_chosen_channel():
    """1.36.0-gke.3302004 is offered in the location (RAPID) but REGULAR offers up to 1.35.5-gke.1163012."""
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(Exception, match=r"gkeVersion='1.36' is not offered in the REGULAR channel in us-east5-b"):
        run_program({**MINIMAL, "gkeVersion": "1.36"}, stack="channel", monitor=monitor)
    assert [r.type for r in monitor.registrations if r.custom] == []
    run = run_program({**MINIMAL, "gkeVersion": "1.36", "releaseChannel": "RAPID"}, stack="channel")
    assert run.one(CLUSTER).inputs["minMasterVersion"] == "1.36"


# ---- an exact pin GKE later retires ---------------------------------------------------------------------------------

RETIRED = "1.33.1-gke.1107000"   # not in the mocked offer (preview/harness.py OFFERED_GKE_VERSIONS): retired


def test_a_retired_pin_is_refused_for_a_new_cluster():
    with pytest.raises(Exception, match=f"gkeVersion='{RETIRED}' is not offered"):
        run_program({**MINIMAL, "gkeVersion": RETIRED}, stack="pin")


def test_a_retired_pin_does_not_stop_the_next_up_of_the_cluster_it_created(monkeypatch, caplog):
    """The provider creates at min_master_version and after that treats it as a floor the running cluster meets, so
    an existing cluster goes on; the program warns instead of refusing."""
    monkeypatch.setitem(harness.EXISTING, "clusters", {"tpu-multislice"})
    with caplog.at_level(logging.WARNING):
        run = run_program({**MINIMAL, "gkeVersion": RETIRED}, stack="pin")
    assert run.one(CLUSTER).inputs["minMasterVersion"] == RETIRED
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"gkeVersion='{RETIRED}' is not offered" in w and "already exists" in w for w in warnings), warnings


def test_committed_stacks_pass_their_lookups():
    for stack in ("prod", "dev"):
        run_program(load_stack_config(stack, REPO), stack=stack)


# The provider's answer without Application Default Credentials (pulumi/pulumi-gcp provider/provider_test.go
# TestCheckConfigNoCredentials), and an expired login's token refresh (golang.org/x/oauth2 "invalid_grant").
NO_CREDENTIALS = (
    "failed to load application credentials.\nTo use your default gcloud credentials, run:\n\t`gcloud auth "
    "application-default login`\nSee https://www.pulumi.com/registry/packages/gcp/installation-configuration/ for "
    "details.\nExpanded error message: Attempted to load application default credentials since neither "
    "`credentials` nor `access_token` was set in the provider block.  No credentials loaded. To use your gcloud "
    "credentials, run 'gcloud auth application-default login'.  Original error: google: could not find default "
    "credentials. See https://cloud.google.com/docs/authentication/external/set-up-adc for more information")
EXPIRED = ('Get "https://cloudresourcemanager.googleapis.com/v1/projects/my-tpu-project?alt=json": oauth2: '
           '"invalid_grant" "reauth related error (invalid_rapt)"')


@pytest.mark.parametrize("message,words", [(NO_CREDENTIALS, "no Google Cloud credentials found"),
                                           (EXPIRED, "the Google Cloud login has expired")])
def test_preview_without_credentials_ends_in_one_line_saying_how_to_log_in(message, words):
    """`pulumi preview` without a login: the first look-up fails with the provider's credentials error, which the
    program turns into one line naming the login command (no traceback, nothing registered)."""
    monitor = RecordingMonitor(FailingMocks("gcp:organizations/getProject:getProject", message))
    with pytest.raises(Exception) as error:
        run_program(MINIMAL, stack="fresh", monitor=monitor)
    assert type(error.value).__name__ == "RunError"
    text = str(error.value)
    assert text == f"tpu-multislice: {words}; run: gcloud auth application-default login"
    assert len(text) <= 100 and "Traceback" not in text
    assert [r.type for r in monitor.registrations if r.custom] == []
