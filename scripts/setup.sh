#!/usr/bin/env bash
# One-time setup on a fresh machine that has only Python 3.11+: a virtual environment in .venv with
# everything the stack, the trainer and the tests need. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet -r requirements.txt
bash scripts/install_maxtext.sh .venv/bin/python
# Graphviz renders `python -m infra.plan --graph`; without it the plan writes DOT instead (best effort).
if ! command -v dot >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  (apt-get update -qq && apt-get install -y -qq graphviz >/dev/null) || echo "note: graphviz not installed; --graph writes DOT"
fi
echo "setup done: $(.venv/bin/python --version), venv in .venv"
