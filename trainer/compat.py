"""Make the installed MaxText importable on Python 3.11 with jax 0.10 (run by scripts/install_maxtext.sh).

MaxText >= 0.1 declares Requires-Python >= 3.12, but only two things in 0.2.5 actually need more than
this machine has (docs/platform-notes.md §5, reproduced here):

1. Two modules (`kernels/mhc/common.py`, `kernels/mhc/api.py`) use the 3.12-only `type X = ...`
   alias statement. On 3.11 that is a SyntaxError at import time. Rewriting it to the plain
   assignment `X = ...` keeps the same runtime meaning for these non-generic aliases.
2. The flash-attention kernel imports `jax.experimental.xla_metadata.must_fuse_call`, which jax 0.10
   (the newest jax that supports 3.11) lacks. It is a fusion *hint*; a pass-through decorator keeps
   the kernel correct. The import is wrapped so that a jax which has the function still uses it.

Each fix is applied only when it is needed (Python < 3.12 for the first; a jax without
`must_fuse_call` for the second), so on Python >= 3.12 with the jax MaxText itself asks for this
script changes nothing. Every edit is idempotent: a patched file no longer matches the pattern.
The installed files are edited in place (not monkey-patched at run time) so that every process
that imports MaxText, including Ray workers started by other tools, sees the same code.

Usage: python -m trainer.compat [--check]   (--check: exit 1 if a fix is still pending, change nothing)
"""
from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

from core.cli_errors import OneLineParser

# `type Name = value` at any indentation. Generic aliases (`type Name[T] = ...`) are deliberately not
# matched: they have no 3.11 spelling, and meeting one should fail loudly (see _check_no_generic_alias).
_TYPE_ALIAS = re.compile(r"^(?P<indent>[ \t]*)type[ \t]+(?P<name>[A-Za-z_]\w*)[ \t]*=", re.MULTILINE)
_GENERIC_TYPE_ALIAS = re.compile(r"^[ \t]*type[ \t]+[A-Za-z_]\w*\[", re.MULTILINE)

_MUST_FUSE_IMPORT = "from jax.experimental.xla_metadata import must_fuse_call\n"
_MUST_FUSE_MARKER = "# tpu-multislice compat: must_fuse_call fallback"
_MUST_FUSE_REPLACEMENT = f"""{_MUST_FUSE_MARKER}
try:
  from jax.experimental.xla_metadata import must_fuse_call
except ImportError:  # jax < 0.11 has no must_fuse_call; it is only a fusion hint.
  def must_fuse_call(*_args, **_kwargs):
    return lambda fn: fn
"""


class CompatError(RuntimeError):
    pass


def maxtext_dir() -> Path:
    spec = importlib.util.find_spec("maxtext")
    if spec is None or not spec.submodule_search_locations:
        raise CompatError("maxtext is not installed in this Python environment")
    return Path(next(iter(spec.submodule_search_locations)))


def needs_type_alias_fix() -> bool:
    return sys.version_info < (3, 12)


def needs_must_fuse_fix() -> bool:
    # Look the attribute up without importing all of jax.experimental's optional dependencies.
    try:
        import jax.experimental.xla_metadata as xla_metadata
    except ImportError:
        return True
    return not hasattr(xla_metadata, "must_fuse_call")


def rewrite_type_aliases(source: str) -> str:
    if _GENERIC_TYPE_ALIAS.search(source):
        raise CompatError("generic `type X[T] = ...` alias has no Python 3.11 equivalent; use Python >= 3.12")
    return _TYPE_ALIAS.sub(lambda m: f"{m['indent']}{m['name']} =", source)


def rewrite_must_fuse_import(source: str) -> str:
    if _MUST_FUSE_MARKER in source:
        return source
    return source.replace(_MUST_FUSE_IMPORT, _MUST_FUSE_REPLACEMENT, 1)


def pending_edits(root: Path) -> dict[Path, str]:
    """Files that a fix would change, mapped to their new text. Empty when nothing is needed."""
    edits: dict[Path, str] = {}
    fix_aliases, fix_fuse = needs_type_alias_fix(), needs_must_fuse_fix()
    if not (fix_aliases or fix_fuse):
        return edits
    for path in sorted(root.rglob("*.py")):
        original = path.read_text(encoding="utf-8")
        text = original
        if fix_aliases and "type " in text:
            text = rewrite_type_aliases(text)
        if fix_fuse and _MUST_FUSE_IMPORT in text:
            text = rewrite_must_fuse_import(text)
        if text != original:
            edits[path] = text
    return edits


def apply(root: Path) -> list[Path]:
    edits = pending_edits(root)
    for path, text in edits.items():
        path.write_text(text, encoding="utf-8")
        # Drop bytecode compiled from the old text so no interpreter can pick it up instead.
        for pyc in path.parent.glob(f"__pycache__/{path.stem}.*.pyc"):
            pyc.unlink()
    return sorted(edits)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m trainer.compat", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report pending fixes and exit 1 if any; change nothing")
    args = parser.parse_args(argv)
    try:
        root = maxtext_dir()
        if args.check:
            pending = sorted(pending_edits(root))
            for path in pending:
                print(f"pending: {path.relative_to(root.parent)}")
            return 1 if pending else 0
        changed = apply(root)
    except CompatError as err:
        print(f"trainer.compat: {err}", file=sys.stderr)
        return 2
    if changed:
        for path in changed:
            print(f"trainer.compat: patched {path.relative_to(root.parent)}")
    else:
        print(f"trainer.compat: nothing to do (Python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
