"""trainer.compat: the Python 3.11 source fixes for MaxText are exact, idempotent and skipped when not needed."""
import sys

import pytest

from trainer import compat


def test_type_alias_statement_becomes_an_assignment():
    source = "import jax\ntype KernelContext = tuple[jax.Array, jax.Array]\n  type Inner = int\nprototype = 1\n"
    fixed = compat.rewrite_type_aliases(source)
    assert fixed == "import jax\nKernelContext = tuple[jax.Array, jax.Array]\n  Inner = int\nprototype = 1\n"
    assert compat.rewrite_type_aliases(fixed) == fixed          # idempotent
    compile(fixed.replace("  Inner", "Inner"), "<fixed>", "exec")


def test_generic_alias_is_refused_not_mangled():
    with pytest.raises(compat.CompatError, match="generic"):
        compat.rewrite_type_aliases("type Pair[T] = tuple[T, T]\n")


def test_must_fuse_import_gets_a_fallback_once():
    source = "import jax\nfrom jax.experimental.xla_metadata import must_fuse_call\nx = 1\n"
    fixed = compat.rewrite_must_fuse_import(source)
    assert "except ImportError" in fixed and compat.rewrite_must_fuse_import(fixed) == fixed
    namespace = {}
    exec(compile(fixed, "<fixed>", "exec"), namespace)
    decorator = namespace["must_fuse_call"]("qk")
    assert decorator(len)("abc") == 3                            # works whichever branch ran


def test_installed_maxtext_needs_no_further_fix():
    pytest.importorskip("maxtext")
    assert compat.pending_edits(compat.maxtext_dir()) == {}


def test_type_alias_fix_is_only_for_python_below_3_12():
    assert compat.needs_type_alias_fix() == (sys.version_info < (3, 12))
