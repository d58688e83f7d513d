"""trainer.progress: what a progress log says about recovery, steps redone and goodput."""
from trainer import progress


def _step(t, attempt, step, loss=1.0, dt=0.5, workers=4):
    return {"event": "step", "t": t, "attempt": attempt, "step": step, "loss": loss, "step_time_s": dt,
            "workers": workers}


def test_retry_after_a_worker_kill():
    records = [{"event": "attempt", "t": 0, "attempt": "a", "workers": 4, "slices": 2, "maxtext_version": "0.2.5"}]
    records += [_step(1 + s, "a", s) for s in range(13)]                    # steps 0..12 done
    records += [{"event": "failure", "t": 13.5, "kind": "worker-killed", "at_step": 12}]
    records += [{"event": "attempt", "t": 20, "attempt": "b", "workers": 4, "slices": 2, "maxtext_version": "0.2.5"}]
    records += [_step(25 + s, "b", 11 + s, loss=0.5) for s in range(19)]    # resumes at 11, ends at 29
    s = progress.summarize(records, target_steps=30)
    assert s.reached_target and s.steps_completed == 30 and s.final_loss == 0.5 and s.attempts == 2
    (f,) = s.failures
    assert (f.kind, f.at_step, f.resumed_at_step, f.steps_redone) == ("worker-killed", 12, 11, 2)
    assert f.recovery_s == 25 - 13.5
    assert s.productive_s == 30 * 0.5                                       # redone steps count once


def test_a_failure_never_recovered_from():
    records = [_step(1, "a", 0), {"event": "failure", "t": 2, "kind": "slice-lost", "at_step": 0}]
    s = progress.summarize(records, target_steps=30)
    assert not s.reached_target and s.failures[0].recovery_s is None


def test_log_round_trip(tmp_path):
    progress.append(tmp_path, {"event": "step", "attempt": "a", "step": 0, "loss": 2.0, "step_time_s": 1.0})
    progress.write_worker(tmp_path, 3, {"attempt": "a"})
    (rec,) = progress.read(tmp_path)
    assert rec["step"] == 0 and rec["t"] > 0
    assert progress.read_worker(tmp_path, 3)["attempt"] == "a" and progress.read_worker(tmp_path, 9) is None
