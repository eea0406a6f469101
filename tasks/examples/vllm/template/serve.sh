#!/usr/bin/env bash
# Started by the judge as `bash serve.sh HOST PORT` in a sandbox with no network, a read-only
# root and the weights at $SWARMLAB_ASSETS/model. This file is the candidate's to change.
set -euo pipefail
host=${1:-$SWARMLAB_SERVER_HOST}
port=${2:-$SWARMLAB_SERVER_PORT}
# The root is read-only: every cache goes to the build folder (a tmpfs of this container).
export HOME=${SWARMLAB_BUILD:-/build} XDG_CACHE_HOME=${SWARMLAB_BUILD:-/build}/cache
export VLLM_CACHE_ROOT=$XDG_CACHE_HOME/vllm TRITON_CACHE_DIR=$XDG_CACHE_HOME/triton
export HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1
exec vllm serve "$SWARMLAB_ASSETS/model" \
  --host "$host" --port "$port" \
  --served-model-name model \
  --seed 0 \
  --max-num-seqs 16 \
  --gpu-memory-utilization 0.85
