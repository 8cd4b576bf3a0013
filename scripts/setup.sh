#!/usr/bin/env bash
# Set up Partition Explorer on a fresh Debian/Ubuntu machine:
#   system packages (Graphviz's `dot`; with --test also Chromium for the browser test),
#   a virtualenv in .venv, and the project with its dependencies (torch pinned by constraints.txt).
# Usage: bash scripts/setup.sh          # for the app and the CLI (with transformers: Hugging Face models)
#        bash scripts/setup.sh --test   # also the test dependencies and Chromium
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
[ "${1:-}" = "--test" ] && want_test=1

need=()
command -v dot >/dev/null 2>&1 || need+=(graphviz)
if [ "$want_test" = 1 ] && [ ! -x /usr/bin/chromium ]; then
  need+=(chromium chromium-driver)
fi
if [ "${#need[@]}" -gt 0 ]; then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  echo "setup: installing system packages: ${need[*]}"
  # Another apt process (unattended upgrades, a second set-up) may hold the lock: wait for it
  # rather than fail at once.
  lock_wait=(-o DPkg::Lock::Timeout=600)
  if pgrep -x apt-get >/dev/null 2>&1 || pgrep -x dpkg >/dev/null 2>&1 || pgrep -x unattended-upgr >/dev/null 2>&1; then
    echo "setup: another apt process is running; waiting for its lock (up to 10 minutes)"
  fi
  $sudo apt-get "${lock_wait[@]}" update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock_wait[@]}" install -y -qq "${need[@]}" >/dev/null
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
# The app's Start here box sends a newcomer to Hugging Face presets: the hf extra (transformers,
# accelerate) comes with the plain set-up too.
extra="[hf]"
[ "$want_test" = 1 ] && extra="[hf,dev]"
echo "setup: installing the project into .venv (torch pinned by constraints.txt)"
.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".${extra}"
if [ "$want_test" = 1 ]; then
  # torchtitan's config classes read the exported torchtitan configs back in the tests. Its
  # package requires datasets, wandb and tensorboard for training, which reading a config does
  # not use: install it (and the one module its configs import) without them.
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt --no-deps \
    torchtitan==0.3.0 spmd_types==0.2.3
fi
echo "setup: done"
