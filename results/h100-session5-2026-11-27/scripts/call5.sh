#!/usr/bin/env bash
# session 5, call 1: the whole GPU suite at the last session's final commit
set -u
o=$OUT/c5; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 565 python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=30 > $o/pytest-gpu.txt 2>&1
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
