"""Bad input: one line naming the values, exit 2, and no Ray process started."""
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import entrypoint
from trainer.local import run as local
from trainer.local.cluster import LocalTpuCluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_ray(monkeypatch):
    """Fail the test if anything tries to start the local cluster or a Ray driver."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a Ray process was started for bad input")
    monkeypatch.setattr(LocalTpuCluster, "start", refuse)
    monkeypatch.setattr(entrypoint, "fit", refuse)


@pytest.mark.parametrize("argv, names", [
    (["--model", "gpt-5"], ["gpt-5"]),
    (["--topology", "3x3"], ["3x3"]),
    (["--ici-fsdp", "4", "--ici-tensor", "4"], ["ici_fsdp_parallelism=4", "8"]),
    (["--elastic", "1,3"], ["--slices 2", "1,3"]),
    (["--elastic", "2,1"], ["2,1"]),
    (["--elastic", "1.5,2"], ["1.5,2"]),
    (["--per-device-batch-size", "0.25"], ["0.25"]),
    (["--model", "qwen3-0.6b", "--per-device-batch-size", "64", "--max-target-length", "8192"], ["does not fit", "GiB"]),
    (["--checkpoint-period", "50"], ["checkpoint_period=50", "steps=30"]),
    (["--fail-at", "30"], ["--fail-at 30", "1..29"]),
    # --inject: an ordered list, refused where it could never play (it would wait until --timeout).
    (["--inject", "fail@24,preempt@17", "--fail-at", "3"], ["--inject and --fail-at", "one way"]),
    (["--elastic", "1,2", "--inject", "preempt@12,preempt@20"], ["preempt@20", "full group", "add@STEP"]),
    (["--elastic", "1,2", "--inject", "add@5"], ["add@5", "every slice is in the group"]),
    (["--inject", "add@5"], ["add@5", "--elastic"]),
    (["--inject", "fail@30"], ["fail@30", "1..29"]),
    (["--inject", "preempt@29"], ["preempt@29", "1..28"]),
    (["--inject", "crash@5"], ["crash@5", "fail, kill-slice, preempt, sigterm, add"]),
    (["--elastic", "1,2", "--inject", "sigterm@12,preempt@20"], ["preempt@20", "full group", "add@STEP"]),
    (["--inject", "sigterm@29"], ["sigterm@29", "1..28"]),
    # --fail-slice-from and --hold-slice: alone, in range, with a slice to lose.
    (["--fail-slice-from", "29"], ["--fail-slice-from 29", "1..28"]),
    (["--fail-slice-from", "5", "--slices", "1"], ["--fail-slice-from 5", "needs 2 slices"]),
    (["--fail-slice-from", "5", "--hold-slice", "6:30"], ["--fail-slice-from and --hold-slice", "one of them"]),
    # ... with --inject only on a fixed run, as the list's own preempt@STEP (the hold begins as that notice).
    (["--hold-slice", "6:30", "--inject", "preempt@3"], ["--hold-slice 6", "preempt@6 once"]),
    (["--hold-slice", "6:30", "--inject", "preempt@6,preempt@6"], ["--hold-slice 6", "preempt@6 once"]),
    (["--hold-slice", "6:30", "--inject", "sigterm@6"], ["--hold-slice 6", "preempt@6 once"]),
    (["--elastic", "1,2", "--hold-slice", "6:30", "--inject", "preempt@6,add@8"], ["--hold-slice 6", "fixed-size"]),
    (["--fail-slice-from", "5", "--hold-slice", "6:30", "--inject", "preempt@6"],
     ["--fail-slice-from and --hold-slice", "one of them"]),
    (["--hold-slice", "6:30", "--fail-at", "3"], ["--hold-slice and --fail-at", "one of them"]),
    (["--hold-while", "lease-file"], ["--hold-while lease-file", "--hold-slice"]),
    (["--hold-slice", "0:30"], ["--hold-slice 0", "1..28"]),
    (["--elastic", "1,2", "--start-slices", "1", "--add-slice-at", "5", "--fail-slice-from", "8"],
     ["--fail-slice-from and --add-slice-at", "one of them"]),
    (["--slices", "1", "--inject", "kill-slice@5"], ["kill-slice@5", "needs 2 slices"]),
    (["--kill-slice-at", "5", "--slices", "1"], ["--kill-slice-at", "1"]),
    (["--preempt-slice-at", "29"], ["--preempt-slice-at 29", "1..28", "last step"]),
    (["--preempt-slice-at", "40"], ["--preempt-slice-at 40", "1..28"]),
    (["--preempt-slice-at", "12", "--fail-at", "12"], ["--fail-at 12", "--preempt-slice-at 12", "same step"]),
    (["--preempt-slice-at", "12", "--kill-slice-at", "12"], ["--kill-slice-at 12", "same step"]),
    (["--elastic", "1,2", "--start-slices", "2", "--add-slice-at", "5"], ["--start-slices 2", "1..1"]),
    (["--start-slices", "1", "--add-slice-at", "5"], ["--elastic"]),
    (["--dataset-type", "grain"], ["dataset_type=grain", "path"]),
    (["--dataset-type", "grain", "--dataset-path", "/d/*", "--pretokenized",
      "--tokenizer-path", "tokenizer.llama2"], ["tokenizer_path='tokenizer.llama2'", "tiny"]),
    (["--dataset-type", "tfds", "--dataset-path", "c4"], ["dataset_type=tfds", "not offered"]),
    (["--elastic", "1,2", "--dataset-type", "grain", "--dataset-path", "/d/*.parquet", "--pretokenized"],
     ["dataset_format=parquet", "elastic resize"]),
    (["--dataset-type", "grain", "--dataset-path", "/d/*"], ["tiny", "pre-tokenized"]),
    (["--model", "tiny-text", "--dataset-type", "grain", "--dataset-path", "/d/*", "--eval-dataset-path", "/e/*"],
     ["eval_dataset_path='/e/*'", "eval_interval"]),
    (["--model", "tiny-text", "--dataset-type", "grain", "--dataset-path", "/d/*", "--set", "tokenize_train_data=false"],
     ["tokenize_train_data", "would replace"]),
])
def test_local_refuses_before_starting_ray(argv, names, no_ray, capsys):
    if argv[:2] == ["--elastic", "1,3"]:
        argv = argv + ["--slices", "2"]
    assert local.main(argv) == 2
    err = capsys.readouterr().err.strip()
    _one_refusal_within_100_columns(err)
    joined = " ".join(line.strip() for line in err.splitlines())
    for name in names:
        assert name in joined


@pytest.mark.parametrize("argv, names", [
    (["--model", "llama3-70b", "--slices", "1"], ["llama3-70b", "1 x v6e-16", "GiB per device"]),
    (["--model", "llama3-70b", "--elastic", "1,2"], ["elastic: at 1 of 1..2 slices", "(estimated)"]),
    (["--model", "tiny"], ["CPU test model"]),
    (["--maxtext-version", "0.2.1", "--base-output-directory", "gs://b"], ["0.2.1", "0.2.2"]),
    (["--dataset-type", "grain", "--dataset-path", "gs://b/*", "--tokenizer-path", "tokenizer.llama2"],
     ["tokenizer_path='tokenizer.llama2'", "llama3-8b", "tokenizer_llama3.tiktoken"]),
    (["--dataset-type", "hf", "--dataset-path", "allenai/c4"], ["dataset_type=hf", "not offered"]),
    (["--dataset-type", "grain"], ["dataset_type=grain needs a dataset path"]),
])
def test_entrypoint_refuses_before_starting_ray(argv, names, no_ray, capsys):
    assert entrypoint.main(["--base-output-directory", "gs://b", *argv]) == 2
    err = capsys.readouterr().err.strip()
    _one_refusal_within_100_columns(err)
    joined = " ".join(line.strip() for line in err.splitlines())
    for name in names:
        assert name in joined


def test_entrypoint_help_runs_as_a_module():
    out = subprocess.run([sys.executable, "-m", "trainer.entrypoint", "--help"], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--elastic" in out.stdout and "--local-cpu" in out.stdout


def _one_refusal_within_100_columns(err: str) -> None:
    """One refusal: its first line unindented, what goes on over further lines indented (core/cli_errors.py)."""
    lines = err.splitlines()
    assert len([line for line in lines if not line.startswith(" ")]) == 1, err
    assert all(len(line) <= 100 for line in lines), err


@pytest.mark.parametrize("flag, value, says", [("--hold-slice", "12", "not STEP:SECONDS"),
                                               ("--hold-slice", "12:0", "more than 0 seconds"),
                                               ("--hold-slice", "x:30", "not STEP:SECONDS")])
def test_local_slice_flags_that_do_not_parse_are_refused_in_one_line(flag, value, says, no_ray, capsys):
    with pytest.raises(SystemExit) as exited:
        local.main([flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


def test_local_slice_flags_parse():
    from trainer.local.injections import _events, _hold

    args = local.build_parser().parse_args(["--hold-slice", "12:300", "--fail-slice-from", "9"])
    assert args.hold_slice == (12, 300.0) == _hold("12:300") and args.fail_slice_from == 9
    assert _events("preempt@4,sigterm@8,add@9") == ((4, "preempt"), (8, "sigterm"), (9, "add"))
