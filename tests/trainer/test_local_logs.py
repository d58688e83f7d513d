"""The local run's console: library notices are counted, not shown, unless --verbose (trainer/local/logs.py); the
end of the run says where the checkpoints and logs are (trainer/local/run.py report_outputs)."""
from __future__ import annotations

from trainer.local import logs
from trainer.local.run import build_parser, report_outputs

# Lines as MaxText 0.2.5 (maxtext/common/goodput.py, gcp_workload_monitor.py) and the tokenizers library print them.
DRIVER_LOG = """\
(RayTrainWorker pid=1) [GOODPUT NO-OP] monitoring disabled (decoupled stub).
(RayTrainWorker pid=1) [DECOUPLED NO-OP] heartbeat metric skipped (google monitoring unavailable).
(RayTrainWorker pid=2) [DECOUPLED NO-OP] performance metric skipped (google monitoring unavailable).
huggingface/tokenizers: The current process just got forked, after parallelism has already been used.
(RayTrainWorker pid=1) completed step: 3, seconds: 2.1, loss: 3.88
"""


def test_notices_are_counted_by_kind_and_progress_is_not(tmp_path):
    log = tmp_path / "driver.log"
    log.write_text(DRIVER_LOG)
    counts = logs.count_notices(logs.read_lines(log))
    assert counts == {"MaxText cloud no-ops": 3, "tokenizer/transformers notices": 1}
    assert logs.notice_kind("(RayTrainWorker pid=1) completed step: 3, seconds: 2.1, loss: 3.88") is None
    line = logs.summary(log)
    assert "3 MaxText cloud no-ops" in line and "1 tokenizer/transformers notices" in line and "--verbose" in line


def test_follower_returns_each_complete_line_once(tmp_path):
    log = tmp_path / "driver.log"
    follower = logs.LogFollower(log)
    assert follower.new_lines() == []
    log.write_text("one\ntw")
    assert follower.new_lines() == ["one"]
    with open(log, "a") as handle:
        handle.write("o\nthree\n")
    assert follower.new_lines() == ["two", "three"]
    assert follower.new_lines() == []


def test_the_end_of_a_run_says_where_checkpoints_and_logs_are(tmp_path, capsys):
    for step in ("0", "4", "2"):
        (tmp_path / "output" / "local" / "checkpoints" / step).mkdir(parents=True)
    (tmp_path / "driver.log").write_text(DRIVER_LOG)
    report_outputs(tmp_path, "local")
    out = capsys.readouterr().out
    assert f"checkpoints {tmp_path / 'output' / 'local' / 'checkpoints'} (steps 0, 2, 4)" in out
    assert f"driver log  {tmp_path / 'driver.log'} (5 lines)\n" in out
    assert "\n    not shown here: 3 MaxText cloud no-ops" in out


def test_keep_and_verbose_are_options():
    args = build_parser().parse_args(["--keep", "--verbose"])
    assert args.keep and args.verbose
    assert not build_parser().parse_args([]).keep
