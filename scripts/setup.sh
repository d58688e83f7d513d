#!/usr/bin/env bash
# One-time setup on a fresh machine that has only Python 3.11+: a virtual environment in .venv with
# everything the stack, the trainer and the tests need. Safe to run again.
#
# It takes minutes (4.5 on an idle 2-core machine, 20 at a load average of 10; README), so it says what it does:
# one line per step, a line every SETUP_HEARTBEAT_S seconds (default 30) while a step runs, and each step's time.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
HEARTBEAT_S=${SETUP_HEARTBEAT_S:-30}
STEPS=6
started=$SECONDS

elapsed() { local s=$((SECONDS - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

# step N TITLE COMMAND...: run COMMAND, saying what it is, that it is still running, and how long it took.
step() {
  local number=$1 title=$2; shift 2
  local t0=$SECONDS
  echo "setup [$number/$STEPS] $title"
  "$@" &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    waited=$((waited + 1))
    if [ "$waited" -ge "$HEARTBEAT_S" ] && kill -0 "$pid" 2>/dev/null; then
      echo "setup [$number/$STEPS]   still running ($(elapsed "$t0"))"
      waited=0
    fi
  done
  if wait "$pid"; then
    echo "setup [$number/$STEPS]   done in $(elapsed "$t0")"
  else
    local rc=$?
    echo "setup [$number/$STEPS] failed (exit $rc) after $(elapsed "$t0"): $title" >&2
    exit "$rc"
  fi
}

make_venv() { [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv; }
install_requirements() { .venv/bin/python -m pip install --quiet -r requirements.txt; }
# Graphviz renders `python -m preview --graph FILE.svg`; without it the plan writes DOT instead (best effort).
install_graphviz() {
  if command -v dot >/dev/null 2>&1; then
    echo "setup         graphviz already installed"
  elif command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && apt-get install -y -qq graphviz >/dev/null) \
      || echo "setup         note: graphviz not installed; --graph writes DOT"
  else
    echo "setup         note: graphviz not installed (needs root and apt-get); --graph writes DOT"
  fi
}

# The pinned KubeRay/JobSet/Kueue CRDs the plan checks custom resources against (preview/k8s/crd_fetch.py): a few
# seconds at most, and never a failed setup: offline it says in one line how to provide them, and setup's last
# lines say what that means for the offline plans.
fetch_crds() { .venv/bin/python -m preview.k8s.crd_fetch --timeout 10 || : > "$CRDS_MISSING"; }

step 1 "virtual environment .venv ($("$PYTHON" --version 2>&1))" make_venv
step 2 "pinned packages: requirements.txt and requirements-trainer.txt (the long step)" install_requirements
step 3 "MaxText 0.2.5 (scripts/install_maxtext.sh)" bash scripts/install_maxtext.sh .venv/bin/python
step 4 "Graphviz for the plan's --graph (optional)" install_graphviz
CRDS_MISSING=$(mktemp)
rm -f "$CRDS_MISSING"
step 5 "pinned CRDs for the plan's schema check (from GitHub; optional)" fetch_crds
step 6 "the workers' libtpu for the pre-flight compile (PyPI, ~215 MB; optional)" bash -c ".venv/bin/python -m aot.workers_libtpu --fetch >/dev/null || true"
echo "setup done in $(elapsed "$started"): $(.venv/bin/python --version), venv in .venv"
if [ -e "$CRDS_MISSING" ]; then
  rm -f "$CRDS_MISSING"
  echo "setup: without the CRDs every offline plan (python -m preview) exits 1 after its plan; run"
  echo "setup:   .venv/bin/python -m preview.k8s.crd_fetch where GitHub is reachable, or set"
  echo "setup:   TPU_MULTISLICE_CRDS=DIR to a copy; --no-crd-check plans without them (exit 0)"
fi
# The last line is what to run next: the main job on this machine (README's quick start).
echo "setup: next, the training job on this machine (fake TPU slices): .venv/bin/python -m trainer.local"
