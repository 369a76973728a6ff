#!/usr/bin/env bash
# needs_data.sh - runs a test that trains on Fashion-MNIST, or, where the data set is not
# installed, skips it with the reason (exit 77, which meson reports as skipped), as the GPU
# tests do without a GPU. The files are Debian's dataset-fashion-mnist package; examples/train
# reads them from /usr/share/datasets/fashion-mnist unless given --data.
# Usage: needs_data.sh COMMAND [ARGS...]
set -uo pipefail
dir=/usr/share/datasets/fashion-mnist
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
    if [ ! -r "$dir/$f" ]; then
        echo "SKIPPED: Fashion-MNIST is not installed ($dir/$f is missing): install Debian's" \
             "dataset-fashion-mnist package (scripts/setup.sh does), or run examples/train" \
             "with --data DIR"
        exit 77
    fi
done
exec "$@"
