#!/usr/bin/env bash
# quickstart.sh - the README's first command: installs what is missing, builds, and trains the
# example model on Fashion-MNIST (shipped by Debian's dataset-fashion-mnist) on 2 ranks.
# Fails if the held-out accuracy does not reach the stated target.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
scripts/mpirun.sh -np 2 build/examples/train --epochs 5 --min-accuracy 0.85 "$@"
