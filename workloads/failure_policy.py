"""JobSet failure policy (pure): end the run at once on what a retry cannot fix, restart it without counting on a
preempted or evicted pod, and leave everything else to `maxRestarts`.

The mechanism (JobSet v0.12.0 api/jobset/v1alpha2/jobset_types.go and pkg/controllers/failure_policy.go; Kubernetes
"Handling retriable and non-retriable pod failures with Pod failure policy",
https://kubernetes.io/docs/tasks/job/pod-failure-policy/):
- each child Job's `podFailurePolicy` turns a pod failure into a Job failure with reason PodFailurePolicy and the
  message "... matching FailJob rule at index N" (the Job controller's wording: "Pod <ns>/<pod> has condition
  DisruptionTarget matching FailJob rule at index 0", "Container <c> for pod <ns>/<pod> failed with exit code 5
  matching FailJob rule at index 1"); the pods must have restartPolicy Never;
- the JobSet's `failurePolicy.rules` are tried in order, the first whose `onJobFailureReasons` and
  `onJobFailureMessagePatterns` (Go regular expressions, regexp.MatchString) match decides; none matching means
  RestartJobSet, which counts toward maxRestarts.

Rule 0, DisruptionTarget: the kubelet's graceful node shutdown (a Spot notice, maintenance), the eviction API, the
scheduler's preemption and the pod garbage collector (node gone) mark the pod so. The JobSet restarts every slice
together (a multislice JAX program cannot lose a host) and the restart does not count: the run resumes from the
checkpoint saved at the notice. Rule 1, an exit code in core.exit_codes.NOT_RETRYABLE (configuration, import or
data error, failed smoke test, XLA out of HBM): the JobSet fails at once, nothing is retried. Rule 2, exit code PREEMPTED (143)
without DisruptionTarget: at a notice JAX's preemption sync makes every host of every slice save at the same step
and leave (trainer/jobset_run.py exits 143), so the slice that was NOT preempted fails too, with no condition on its
pods; without this rule its Job ends BackoffLimitExceeded, no JobSet rule matches and the default RestartJobSet
counts a preemption against maxRestarts whenever that Job is the first to fail (JobSet's findFirstFailedPolicyRuleAndJob
tries the rules in order and, per rule, picks the earliest failed Job it matches; tests/workloads/test_failure_policy.py
plays both orders). The Job failure message is the JobSet project's own documented way to tell them apart (its
onJobFailureMessagePatterns exists for this), but it is the Job controller's text, not an API field: the offline plan
lists it among its assumptions.

Rule names: JobSet v0.12.0's webhook refuses any name not matching `^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$`
(1-128 characters, unique; pkg/webhooks/jobset_webhook.go validateFailurePolicy), a rule the CRD states only in a
description; preview/k8s/admission.py plays it on every JobSet the stack renders.
"""
from __future__ import annotations

from core.exit_codes import NOT_RETRYABLE, PREEMPTED

POD_FAILURE_POLICY_REASON = "PodFailurePolicy"     # batch/v1 JobReasonPodFailurePolicy
# Indexes of the podFailurePolicy rules (the Job controller's message names the index of the rule that matched).
DISRUPTED_RULE = 0
NOT_RETRYABLE_RULE = 1
NOTICE_EXIT_RULE = 2
# JobSet failurePolicy rule names (the webhook's pattern: letters, digits, '_', ',', ':').
DISRUPTED_NAME = "PreemptedOrEvicted"
NOT_RETRYABLE_NAME = "NotRetryableExit"
NOTICE_EXIT_NAME = "SavedAtPreemptionNotice"


def pod_failure_policy(exit_code_container: str | None, notice_exit: bool = False) -> dict:
    """A child Job's podFailurePolicy; the exit-code rule only for a container that speaks core.exit_codes, the
    notice rule (exit PREEMPTED) only where every host leaves together at a notice (JAX's preemption sync)."""
    rules: list[dict] = [{"action": "FailJob",
                          "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]
    if exit_code_container is not None:
        rules.append({"action": "FailJob",
                      "onExitCodes": {"containerName": exit_code_container, "operator": "In",
                                      "values": sorted(NOT_RETRYABLE)}})
        if notice_exit:
            rules.append({"action": "FailJob",
                          "onExitCodes": {"containerName": exit_code_container, "operator": "In",
                                          "values": [PREEMPTED]}})
    return {"rules": rules}


def jobset_rules(exit_codes: bool, target_replicated_jobs: list[str] | None = None,
                 notice_exit: bool = False) -> list[dict]:
    """The JobSet's failurePolicy.rules matching pod_failure_policy's rule indexes (for the replicated jobs that
    carry that policy, built with the same `notice_exit`)."""
    target = {"targetReplicatedJobs": list(target_replicated_jobs)} if target_replicated_jobs else {}
    rules = [{
        "name": DISRUPTED_NAME,
        "action": "RestartJobSetAndIgnoreMaxRestarts",
        "onJobFailureReasons": [POD_FAILURE_POLICY_REASON],
        "onJobFailureMessagePatterns": [f"has condition DisruptionTarget matching FailJob rule at index "
                                        f"{DISRUPTED_RULE}$"],
        **target,
    }]
    if exit_codes:
        rules.append({
            "name": NOT_RETRYABLE_NAME,
            "action": "FailJobSet",
            "onJobFailureReasons": [POD_FAILURE_POLICY_REASON],
            "onJobFailureMessagePatterns": [f"failed with exit code [0-9]+ matching FailJob rule at index "
                                            f"{NOT_RETRYABLE_RULE}$"],
            **target,
        })
        if notice_exit:
            rules.append({
                "name": NOTICE_EXIT_NAME,
                "action": "RestartJobSetAndIgnoreMaxRestarts",
                "onJobFailureReasons": [POD_FAILURE_POLICY_REASON],
                "onJobFailureMessagePatterns": [f"failed with exit code {PREEMPTED} matching FailJob rule at index "
                                                f"{NOTICE_EXIT_RULE}$"],
                **target,
            })
    return rules


# What the offline plan cannot verify about these rules (shown among its assumptions for JobSet and Pathways).
ASSUMPTION = ("JobSet failure policy: its rules tell a preempted pod (restart, not counted) from an exit code a retry "
              "cannot fix (fail at once) by the Job controller's failure message \"... matching FailJob rule at index "
              "N\" (Kubernetes pkg/controller/job/pod_failure_policy.go; JobSet v0.12 onJobFailureMessagePatterns "
              "exists for this), which is text, not an API field; after a failure `kubectl get jobs -n NAMESPACE -o "
              "jsonpath='{..conditions}'` shows the message")
# What the plan cannot verify about telling an out-of-HBM failure apart (Ray and JobSet run the project's trainer).
OUT_OF_HBM_ASSUMPTION = (
    "out of HBM: the trainer tells XLA running out of the TPU's memory (exit 6, not retried) by its message, "
    "RESOURCE_EXHAUSTED naming HBM or a device buffer (trainer/failures.py); the compile-time form is the workers' "
    "libtpu 0.0.50.1's own (python -m preview.compile), the run-time form is read from public reports, not seen "
    "here; an unrecognised one exits 1 and is retried")
