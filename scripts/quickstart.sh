#!/usr/bin/env bash
# quickstart.sh - the README's first command: installs what is missing, builds, and trains the
# example model on Fashion-MNIST (shipped by Debian's dataset-fashion-mnist) on 2 ranks.
# Fails if the held-out accuracy does not reach the stated target (85 % for the MLP).
# The ranks start through hvdcrun, the launcher (build/hvdcrun; docs/running.md).
# The test suite runs the training step alone on its own build: HVDC_SKIP_SETUP=1 skips
# setup.sh, HVDC_TRAIN names the binary (default build/examples/train) and HVDCRUN the
# launcher (default build/hvdcrun).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${HVDC_SKIP_SETUP:-0}" = 1 ] || scripts/setup.sh
"${HVDCRUN:-build/hvdcrun}" -np 2 "${HVDC_TRAIN:-build/examples/train}" --epochs 5 --min-accuracy 0.85 "$@"
