#!/usr/bin/env bash
# One-time setup on a fresh machine that has only Python 3.11+: a virtual environment in .venv with
# everything the stack, the trainer and the tests need. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -r requirements.txt
if [ -f scripts/install_maxtext.sh ]; then
  bash scripts/install_maxtext.sh .venv/bin/python
fi
echo "setup done: $(.venv/bin/python --version), venv in .venv"
