"""Save at the notice: when the hosts are about to go away (preemption) or the group is about to re-form
(elastic growth), every host saves a checkpoint at the same step and stops stepping.

MaxText 0.2.5 already has the save-and-stop half (maxtext/common/checkpointing.py): at every step
`maybe_save_checkpoint` asks `reached_preemption(manager, step)`; with `enable_autocheckpoint=true` a True makes
it save that step, wait for the save to finish and raise StopTraining, which `train_loop` catches and returns from
(so the process would exit 0). Its only notice source is JAX's preemption sync manager
(`jax.experimental.multihost_utils.reached_preemption_sync_point`): SIGTERM to any JAX process of the job, then
all processes agree on the next step (max over hosts + 1) and report True there. That is how a JobSet pod hears
GKE: the kubelet's SIGTERM reaches the container's process, MaxText's own.

Under Ray Train the JAX processes are Ray workers: GKE's SIGTERM goes to the pod's `ray start` process, whose
handler marks the node draining with a deadline (ray/_private/node.py `_drain_node_before_shutdown`, default
RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S=30); no JAX process is signalled. Ray Train's PreemptionWatcher polls the
drains (every RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S, default 5 s), widens a drained TPU host to its whole slice
and marks every worker; `ray.train.get_preemption_info()` returns it, broadcast from rank 0, so all workers see
it at the same call — the same step when called once per step (ray/train/v2/api/train_fn_utils.py). JaxTrainer
saves nothing by itself; `install` adds that poll to MaxText's `reached_preemption` and forces the save
(Orbax's save policy only knows JAX's notice).

After the save a Ray worker must not return: "a run that returns cleanly always finishes" (get_preemption_info's
docstring) — the run would end as if done. It waits instead; the controller, in its preempting state, restarts
the group after the drain deadline and counts it as a preemption (FailureConfig.max_preemption_failures).

On the Pathways proxy Orbax reports no preemption at all (orbax-checkpoint 0.12.8, the workers' lock:
orbax/checkpoint/_src/multihost/multihost.py `reached_preemption` returns False when `is_proxy_pathways_backend()`,
"disable checkpoint saving when preemption", b/403305420): a Pathways run loses the steps since its last periodic
checkpoint. The Pathways trainer runs the MaxText image's own Orbax, which this project does not pin: that it
behaves the same is assumed, not read.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from trainer import patching

# MaxText keys that make a True from `reached_preemption` save (not only stop). enable_checkpointing is already
# set by core.maxtext_args for every run.
REQUIRED_OVERRIDES = ("enable_checkpointing=true", "enable_autocheckpoint=true")


@dataclass
class NoticeWatch:
    """Asks `poll(step)` at most once per step (every host must ask the same number of times: Ray's
    get_preemption_info and broadcast are barriers) and remembers the first notice."""

    poll: Callable[[int], str | None]        # the reason to save and stop at this step, or None
    on_notice: Callable[[int, str], None] | None = None
    notice_step: int | None = None
    reason: str | None = None
    _asked: dict[int, str | None] = field(default_factory=dict)

    def at(self, step: int, jax_notice: bool = False) -> bool:
        if step not in self._asked:
            self._asked = {step: self.poll(step)}        # only the current step matters
        reason = self._asked[step] or ("SIGTERM to this job's JAX processes" if jax_notice else None)
        if reason and self.notice_step is None:
            self.notice_step, self.reason = step, reason
            if self.on_notice:
                self.on_notice(step, reason)
        return reason is not None

    @property
    def stopped(self) -> bool:
        return self.notice_step is not None


def install(watch: NoticeWatch) -> None:
    """Make MaxText's checkpointing hear `watch` besides JAX's preemption notice. Idempotent per process."""
    from maxtext.common import checkpointing

    reached = patching.original(checkpointing.reached_preemption)
    save = patching.original(checkpointing.save_checkpoint)

    def reached_with_watch(checkpoint_manager, step):
        return watch.at(int(step), jax_notice=bool(reached(checkpoint_manager, step)))

    def save_at_notice(checkpoint_manager, step, state, config=None, data_iterator=None, force=False):
        # Orbax's save-decision policy would decline a step that is neither on the period nor JAX's sync point.
        return save(checkpoint_manager, step, state, config, data_iterator, force or watch.at(int(step)))

    patching.install(checkpointing, "reached_preemption", reached_with_watch, reached)
    patching.install(checkpointing, "save_checkpoint", save_at_notice, save)


def require_autocheckpoint(argv: list[str]) -> None:
    missing = [item for item in REQUIRED_OVERRIDES if item not in argv]
    if missing:
        raise ValueError(f"MaxText argv lacks {', '.join(missing)}: a notice would stop the run without saving")


def ray_poll(elastic_notice: Callable[[], bool] | None = None) -> Callable[[int], str | None]:
    """The Ray worker's poll: Ray Train's preemption notice and, for elastic runs, a pending scale-up
    (trainer.resize), both agreed across workers by a rank-0 broadcast."""
    import ray.train
    from ray.train.collective import broadcast_from_rank_zero

    rank = ray.train.get_context().get_world_rank()

    def poll(step: int) -> str | None:
        info = ray.train.get_preemption_info()
        if info is not None:
            return f"preemption notice for ranks {info.preempted_ranks} (deadline_ms={info.deadline_ms})"
        if elastic_notice is not None:
            grow = broadcast_from_rank_zero(bool(elastic_notice()) if rank == 0 else None)
            if grow:
                return "scale-up: more slices are ready, the group re-forms"
        return None

    return poll
