#!/usr/bin/env bash
# Install MaxText into a Python environment and make it importable there.
#
# Usage: bash scripts/install_maxtext.sh [PYTHON]     (default: .venv/bin/python)
#
# Why not a plain `pip install maxtext`: MaxText declares Requires-Python >= 3.12 and pins its whole
# dependency tree (including TPU-only wheels). We install it without dependencies (they come pinned
# from requirements-trainer.txt, versions that were run together here), and on Python 3.11 apply
# the two source fixes in trainer/compat.py. On Python >= 3.12 the compat step changes nothing.
# Running this script twice is harmless: pip sees the version installed and compat finds no edits.
set -euo pipefail

MAXTEXT_VERSION="0.2.5"
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${1:-${repo_root}/.venv/bin/python}"

if ! "${python}" -c 'import jax, ray.train' 2>/dev/null; then
  echo "install_maxtext: ${python} lacks jax/ray[train]; run: ${python} -m pip install -r requirements-trainer.txt" >&2
  exit 1
fi

"${python}" -m pip install --quiet --no-deps --ignore-requires-python "maxtext==${MAXTEXT_VERSION}"

# compat is a module of this project; run it from the repo root so `trainer` is importable.
cd "${repo_root}"
"${python}" -m trainer.compat
# Importing MaxText prints library warnings of up to 180 columns (transformers' "[transformers] PyTorch was not
# found", its RoPE notes, MaxText's "[NO-OP] mldiagnostics"): kept and shown only when the import fails.
if ! said="$("${python}" -m trainer.compat --check 2>&1)"; then
  printf '%s\n' "${said}" | fold -s -w 100 >&2
  echo "install_maxtext: trainer.compat --check failed" >&2
  exit 1
fi
if ! said="$("${python}" -c 'import maxtext.trainers.pre_train.train' 2>&1)"; then
  printf '%s\n' "${said}" | fold -s -w 100 >&2
  echo "install_maxtext: maxtext ${MAXTEXT_VERSION} still does not import" >&2
  exit 1
fi
echo "install_maxtext: maxtext ${MAXTEXT_VERSION} ready for $("${python}" -c 'import sys; print(sys.version.split()[0])')"
