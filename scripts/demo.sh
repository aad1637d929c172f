#!/usr/bin/env bash
# The main job: installs what is missing, builds, then trains the Fashion-MNIST MLP
# (784-256-128-10) on a local cluster of 2 ps, 2 workers and a chief, evaluates it on the
# 10,000 test images and shuts every task down. Extra arguments go to `pstrain local`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the launcher and the daemons it starts: the tests are built by scripts/test.sh.
PSTRAIN_TARGETS="launcher/pstrain daemons/ps/pstrain-ps daemons/worker/pstrain-worker \
daemons/chief/pstrain-chief daemons/evaluator/pstrain-evaluator" bash scripts/setup.sh
MODEL_DIR=${PSTRAIN_MODEL_DIR:-/tmp/pstrain-fmnist}
export OPENBLAS_NUM_THREADS=1
exec build/launcher/pstrain local --cluster configs/cluster-local.json \
  --job configs/job-fmnist-mlp.json --model-dir "$MODEL_DIR" "$@"
