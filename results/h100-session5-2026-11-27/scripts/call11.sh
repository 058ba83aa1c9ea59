#!/usr/bin/env bash
# session 5, call 7 (last): bench --all first on the fresh machine + compare, then the GPU suite but the every-version test (bench --all checks every version at the same sizes)
set -u
o=$OUT/c11; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
vmstat -t 2 > $o/vmstat.txt 2>&1 & vm=$!
t timeout 240 $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
kill $vm
t timeout 30 $W compare results/h100-daily-loop-speedups-2026-11-27/call3-bench-all-0db1124-pyc-h100.json $o/bench-all.json > $o/compare.txt 2>&1
t timeout $(( 580 - SECONDS )) python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=15 -k "not every_version" > $o/pytest-gpu.txt 2>&1
cd $OUT && tar czf c11.tgz c11 && rm -rf c11
