"""What a Spot preemption notice gives the TPU pods, what a checkpoint save of a plan takes, and whether it fits
(pure: the node pool's kubelet budget and the pods' terminationGracePeriodSeconds are sized from it).

The notice (GKE "About Spot VMs", https://cloud.google.com/kubernetes-engine/docs/concepts/spot-vms): after the
preemption notice graceful node shutdown gives the node 30 s, the first 15 s to regular pods and the last 15 s to
critical system pods. On a Standard node pool the node's total can be raised to 120 s, from control plane GKE
1.35.0-gke.1171000, through the kubelet's shutdownGracePeriodSeconds / shutdownGracePeriodCriticalPodsSeconds.
The GKE API takes only 0, 30 or 120 for the total and 0..120 (at most the total) for the critical share
(container v1 discovery document, `NodeKubeletConfig`, as shipped in google-api-python-client; the field is only
valid for Spot VMs). The critical share is kept at GKE's 15 s, so regular pods (the trainer) get 105 s.

The save, when the trainer hears the notice (SIGTERM): every host finishes the step it is in, they agree on that
step (JAX's preemption sync point, which MaxText's `enable_autocheckpoint` uses) and each writes its shards of the
train state to the bucket, then the checkpoint is committed. Estimated here as
    one step at core.run_time.EXPECTED_MFU
  + the bytes one host writes / ASSUMED_WRITE_BYTES_PER_S (an assumption shown in the offline plan)
  + COMMIT_S for Orbax's metadata and commit marker,
and the pods are given SAFETY times that. The train state is parameters + AdamW's two moments, as core/memory.py
counts it (XLA's "arguments"): parameters and nu in weight_dtype, mu in mu_dtype, which follows weight_dtype unless
set (maxtext base.yml). One copy is written: slices that hold the
same weights (data parallelism across slices) do not write twice, so the writers are one slice's hosts, or every
host of the fewest slices when FSDP spans slices.

Where the save does not fit the notice the run falls back to its last periodic checkpoint: a preemption then
costs up to checkpointPeriod steps, which the plan says.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from core.memory import DTYPE_BYTES
from core.planner import Plan
from core.run_time import EXPECTED_MFU, MIN_MFU, step_seconds

# GKE's graceful node shutdown after a Spot notice (module docstring).
GKE_NODE_SHUTDOWN_S = 30
GKE_CRITICAL_PODS_S = 15
EXTENDED_NODE_SHUTDOWN_S = 120
ALLOWED_NODE_SHUTDOWN_S = (0, 30, 120)   # container v1 NodeKubeletConfig.shutdownGracePeriodSeconds
CRITICAL_PODS_S = GKE_CRITICAL_PODS_S    # system pods keep GKE's own share when the total is raised

# Assumption, not a measurement: what one TPU host writes to a regional bucket per second while saving (1 GB/s =
# 8 Gbit/s). Cloud Storage publishes no per-client write rate; it scales a bucket's writes from about 1,000
# object writes per second (Cloud Storage "Quotas & limits", https://cloud.google.com/storage/quotas), and a
# checkpoint is a few large files per host (MaxText's checkpoint_storage_target_data_file_size_bytes: 2 GB), so
# the host's own network and Orbax's concurrency bound it. Measure it from a TPU host before relying on a fit
# (`gcloud storage cp` of a multi-GB file to the bucket).
ASSUMED_WRITE_BYTES_PER_S = 1_000_000_000
COMMIT_S = 5.0
SAFETY = 1.5
# The most a pod is given on a deletion that is not a Spot notice (a drain, a JobSet restart): a save that takes
# longer than this is not worth holding a restart for.
MAX_POD_GRACE_S = 600


@dataclass(frozen=True)
class SaveEstimate:
    checkpoint_bytes: int
    writer_hosts: int
    step_s: float
    write_s: float
    commit_s: float

    @property
    def bytes_per_writer(self) -> float:
        return self.checkpoint_bytes / self.writer_hosts

    @property
    def seconds(self) -> float:
        return self.step_s + self.write_s + self.commit_s

    def describe(self) -> str:
        return (f"checkpoint {self.checkpoint_bytes / 1e9:.1f} GB (parameters + 2 AdamW moments) written by "
                f"{self.writer_hosts} host(s), {self.bytes_per_writer / 1e9:.1f} GB each at an assumed "
                f"{ASSUMED_WRITE_BYTES_PER_S / 1e9:g} GB/s: {self.write_s:.0f} s + up to one step "
                f"{self.step_s:.1f} s + commit {self.commit_s:.0f} s = {self.seconds:.0f} s")


def checkpoint_bytes(plan: Plan) -> int:
    weights = DTYPE_BYTES[plan.weight_dtype]
    return plan.model.param_count * (2 * weights + DTYPE_BYTES[plan.mu_dtype or plan.weight_dtype])


def writer_hosts(plan: Plan) -> int:
    """Hosts that write one copy of the train state, at the fewest slices the run may have."""
    return plan.shape.hosts * (plan.min_slices if plan.dcn_axis == "fsdp" else 1)


def save_estimate(plan: Plan) -> SaveEstimate:
    size, writers = checkpoint_bytes(plan), writer_hosts(plan)
    return SaveEstimate(checkpoint_bytes=size, writer_hosts=writers, step_s=step_seconds(plan, EXPECTED_MFU),
                        write_s=size / writers / ASSUMED_WRITE_BYTES_PER_S, commit_s=COMMIT_S)


@dataclass(frozen=True)
class ShutdownBudget:
    """What the TPU pods and their nodes are given to save, and what a preemption then costs."""
    save: SaveEstimate
    spot: bool
    sees_notice: bool               # the process holding the train state hears SIGTERM (not on Pathways' proxy)
    pod_grace_s: int | None         # TPU pods' terminationGracePeriodSeconds; None: Kubernetes' default
    node_shutdown_s: int | None     # kubelet shutdownGracePeriodSeconds; None: GKE's default (30 s)
    node_critical_s: int | None     # kubelet shutdownGracePeriodCriticalPodsSeconds; None: GKE's default
    checkpoint_period: int
    gated: str = ""                 # why the node budget was not raised although the save needs it
    eval_pass_s: float = 0.0        # the longest eval pass at the slowest MFU allowed (0: no eval)

    @property
    def needed_s(self) -> int:
        return math.ceil(SAFETY * self.save.seconds)

    @property
    def notice_s(self) -> int:
        """What regular pods get after a Spot notice on these nodes."""
        total = self.node_shutdown_s or GKE_NODE_SHUTDOWN_S
        critical = self.node_critical_s if self.node_critical_s is not None else GKE_CRITICAL_PODS_S
        return total - critical

    @property
    def fits(self) -> bool:
        """A Spot notice leaves time for the save (always true off Spot: there is no notice to race)."""
        return not self.spot or (self.sees_notice and self.needed_s <= self.notice_s)

    @property
    def steps_lost_per_preemption(self) -> int:
        """Steps a Spot preemption makes the run redo, at most (0 when the save fits the notice)."""
        return 0 if self.fits else self.checkpoint_period

    def warnings(self) -> list[str]:
        if not self.spot or self.fits:
            return []
        if not self.sees_notice:
            return [f"Spot preemption: the trainer cannot hear the notice on this backend (MaxText runs behind the "
                    f"Pathways proxy, where Orbax reports no preemption), so a preemption falls back to the last "
                    f"periodic checkpoint: up to checkpointPeriod={self.checkpoint_period} steps redone"]
        why = f" ({self.gated})" if self.gated else ""
        return [f"Spot preemption: a save at the notice needs {self.needed_s} s ({SAFETY:g} x the estimated "
                f"{self.save.seconds:.0f} s) but regular pods get {self.notice_s} s{why}; a preemption falls back "
                f"to the last periodic checkpoint: up to checkpointPeriod={self.checkpoint_period} steps redone"]

    def describe(self) -> list[str]:
        lines = [f"save at the notice: {self.save.describe()}; pods get {SAFETY:g} x that = {self.needed_s} s"]
        if not self.sees_notice:
            lines = [f"no save at a notice: MaxText runs behind the Pathways proxy, where a notice is not seen; "
                     f"pods keep Kubernetes' default grace period and an interruption falls back to the last "
                     f"periodic checkpoint (up to {self.checkpoint_period} steps)"]
            return lines
        if not self.spot:
            during_eval = (f" after the rest of an eval pass (up to {self.eval_pass_s:.0f} s)" if self.eval_pass_s
                           else "")
            lines.append(f"not Spot: no preemption notice to race; the TPU pods' terminationGracePeriodSeconds is "
                         f"{self.pod_grace_s} s, what a drain or maintenance shutdown gives them to save"
                         f"{during_eval}")
            return lines
        node = (f"node pool kubelet shutdownGracePeriodSeconds {self.node_shutdown_s} "
                f"(critical pods {self.node_critical_s})" if self.node_shutdown_s
                else f"node pool at GKE's default {GKE_NODE_SHUTDOWN_S} s (critical pods {GKE_CRITICAL_PODS_S})")
        grace = ("Kubernetes' default" if self.pod_grace_s is None else f"{self.pod_grace_s} s")
        lines.append(f"Spot notice: {node}: regular pods get {self.notice_s} s; TPU pods' "
                     f"terminationGracePeriodSeconds {grace}")
        if self.fits:
            lines.append("a preemption costs 0 steps (saved at the notice) plus the restart")
        else:
            lines.append(f"a preemption costs up to {self.checkpoint_period} steps (the last periodic checkpoint) "
                         "plus the restart")
        return lines

    def as_dict(self) -> dict[str, Any]:
        save = self.save
        return {
            "checkpoint_bytes": save.checkpoint_bytes, "writer_hosts": save.writer_hosts,
            "assumed_write_bytes_per_s_per_host": ASSUMED_WRITE_BYTES_PER_S,
            "save_seconds": round(save.seconds, 1), "needed_seconds": self.needed_s, "spot": self.spot,
            "trainer_hears_notice": self.sees_notice, "pod_termination_grace_seconds": self.pod_grace_s,
            "node_shutdown_grace_seconds": self.node_shutdown_s,
            "node_shutdown_grace_critical_pods_seconds": self.node_critical_s,
            "notice_seconds_for_pods": self.notice_s if self.spot else None, "fits": self.fits,
            "steps_lost_per_preemption": self.steps_lost_per_preemption, "warnings": self.warnings(),
        }


def shutdown_budget(plan: Plan, *, spot: bool, sees_notice: bool, checkpoint_period: int,
                    extended_node_budget: str | None = None, eval_steps: int = 0) -> ShutdownBudget:
    """Size the pods' grace period and the node's shutdown budget to the plan's save.

    extended_node_budget: None when the node pool may raise its kubelet budget to 120 s, else why not (the GKE
    version, Autopilot): then a save longer than GKE's 15 s does not fit and the plan says so.
    eval_steps: the steps of one eval pass (0: no eval). Off Spot the pods' grace is ours to size, so it covers
    a pass begun just before the SIGTERM as well as the save (the save comes only after the pass, see
    eval_steps_within_grace); on Spot the node's notice is fixed and the pass is bounded instead."""
    save = save_estimate(plan)
    budget = ShutdownBudget(save=save, spot=spot, sees_notice=sees_notice, pod_grace_s=None, node_shutdown_s=None,
                            node_critical_s=None, checkpoint_period=checkpoint_period,
                            eval_pass_s=eval_steps * eval_step_seconds(plan))
    needed = budget.needed_s
    if not sees_notice:
        return budget       # nothing in the pods can act on the notice: leave every default
    if not spot:
        return dataclasses.replace(budget, pod_grace_s=min(needed + math.ceil(budget.eval_pass_s), MAX_POD_GRACE_S))
    default_notice = GKE_NODE_SHUTDOWN_S - GKE_CRITICAL_PODS_S
    if needed <= default_notice:
        return dataclasses.replace(budget, pod_grace_s=needed)
    if extended_node_budget is not None:
        # A save that cannot finish is worth nothing: no use holding the pod past what the node gives it.
        return dataclasses.replace(budget, pod_grace_s=default_notice, gated=extended_node_budget)
    extended_notice = EXTENDED_NODE_SHUTDOWN_S - CRITICAL_PODS_S
    return dataclasses.replace(budget, pod_grace_s=min(needed, extended_notice), node_shutdown_s=EXTENDED_NODE_SHUTDOWN_S,
                    node_critical_s=CRITICAL_PODS_S)


# A notice that arrives during an eval pass is first acted on after it: MaxText 0.2.5 asks for the notice only in
# the train step's checkpoint call (trainers/pre_train/train.py: `maybe_save_checkpoint` for step N runs before
# step N's eval block), so the save comes after the rest of the pass and one more train step. The pass must
# therefore fit, with the save, in what the pods get after the notice. An eval step is forward only: about a
# third of the train step's FLOPs (2 of 6 per parameter and token), at the train batch Grain really uses
# (core/planner.py eval_batch); timed at the slowest MFU the watchdog allows (run_time.MIN_MFU), not the
# expected one, since a pass that overruns the grace loses every step since the last checkpoint.
EVAL_STEP_FLOPS_SHARE = 1 / 3


def eval_step_seconds(plan: Plan) -> float:
    return EVAL_STEP_FLOPS_SHARE * step_seconds(plan, MIN_MFU)


def eval_steps_within_grace(budget: ShutdownBudget, plan: Plan) -> int | None:
    """The most eval steps one pass may have so that a notice (a Spot notice, or off Spot the SIGTERM of a drain
    or maintenance) at its start is still saved within the pods' time after it: the node's notice on Spot, the
    longest grace we give a pod (MAX_POD_GRACE_S) off Spot. None when no notice is acted on (Pathways), 0 when
    not even the save fits."""
    if not budget.sees_notice:
        return None
    after_notice = budget.notice_s if budget.spot else MAX_POD_GRACE_S
    return max(0, math.floor((after_notice - budget.needed_s) / eval_step_seconds(plan)))

