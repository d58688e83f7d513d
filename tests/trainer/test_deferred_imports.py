"""trainer/deferred_imports.py: the libraries MaxText imports at module level for optional features are bound but
not run when a worker imports MaxText, run at their first use, and every process that trains defers them first."""
import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import deferred_imports

REPO = Path(__file__).resolve().parents[2]


def _installed_file(relative: str) -> Path:
    top = relative.split("/", 1)[0]
    spec = importlib.util.find_spec(top)
    if spec is None:
        pytest.skip(f"{top} is not installed")
    return Path(next(iter(spec.submodule_search_locations))).parent / relative


@pytest.mark.parametrize("name", sorted(deferred_imports.DEFERRED))
def test_each_deferred_module_is_still_imported_at_module_level_where_the_table_says(name):
    """The premise of each entry, read in the installed library: the import is a statement of the module's own
    body (so every import of MaxText's train module runs it), not inside a function. An entry whose import
    moved or went away fails here instead of deferring nothing in silence."""
    pytest.importorskip("maxtext")
    relative, statement = deferred_imports.DEFERRED[name]
    source = _installed_file(relative).read_text()
    wanted = ast.dump(ast.parse(statement).body[0])
    module_level = [ast.dump(node) for node in ast.parse(source).body if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert wanted in module_level, f"{relative} no longer imports {name} at module level ({statement!r})"


PROBE = """
import json, sys
from trainer import deferred_imports
if sys.argv[1] == "defer":
    deferred_imports.install()
from maxtext.trainers.pre_train import train
before = {name: deferred_imports.is_deferred(name) for name in deferred_imports.DEFERRED}
imported = {name: name in sys.modules for name in deferred_imports.DEFERRED}
from google.cloud import aiplatform
usable = callable(aiplatform.init) and hasattr(aiplatform, "Tensorboard")      # the first use
print(json.dumps({"before": before, "imported": imported, "usable": usable,
                  "after": deferred_imports.is_deferred("google.cloud.aiplatform")}))
"""


def test_maxtext_s_train_module_binds_the_deferred_modules_without_running_them_until_first_use():
    """One fresh process, as a worker starts: MaxText's train module imported after install() has every DEFERRED
    module bound (MaxText's import reached it) and none run; the first attribute read of aiplatform (what
    `use_vertex_tensorboard` does first) runs it and gives the real module."""
    pytest.importorskip("maxtext")
    out = subprocess.run([sys.executable, "-c", PROBE, "defer"], cwd=REPO, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["imported"] == {name: True for name in deferred_imports.DEFERRED}, seen
    assert seen["before"] == {name: True for name in deferred_imports.DEFERRED}, seen
    assert seen["usable"] is True and seen["after"] is False, seen


def test_is_deferred_is_false_for_a_module_that_ran_and_for_one_never_imported():
    assert not deferred_imports.is_deferred("json")
    assert not deferred_imports.is_deferred("a_module_nobody_imported")


class _Deferred(Exception):
    pass


def _refuse(*_args, **_kwargs):
    raise _Deferred


def test_every_process_that_trains_defers_before_it_imports_maxtext(monkeypatch):
    """The three places MaxText is imported to train: a Ray Train worker (trainer/worker.py), a JobSet pod
    (trainer.jobset_run) and the Pathways head (trainer.pathways_run). Each calls install() first: with install()
    made to raise, each raises it before reaching MaxText or Ray."""
    from trainer import jobset_run, pathways_run, worker

    monkeypatch.setattr(deferred_imports, "install", _refuse)
    for call in (lambda: worker.train_loop_per_worker({}),
                 lambda: jobset_run.main(["base.yml", "steps=1"]),
                 lambda: pathways_run.main(["base.yml", "steps=1"])):
        with pytest.raises(_Deferred):
            call()
