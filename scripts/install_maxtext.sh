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
"${python}" -m trainer.compat --check >/dev/null
"${python}" -c 'import maxtext.trainers.pre_train.train' \
  || { echo "install_maxtext: maxtext ${MAXTEXT_VERSION} still does not import" >&2; exit 1; }
echo "install_maxtext: maxtext ${MAXTEXT_VERSION} ready for $("${python}" -c 'import sys; print(sys.version.split()[0])')"
