#!/usr/bin/env bash
# session 6, call 3: bench --all first on a fresh machine (baselines held back until the torch child is ready), traced; compare; GPU tests of the loop and isolate
set -u
o=$OUT/c15; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
vmstat -t 2 > $o/vmstat.txt 2>&1 & vm=$!
t timeout 260 python3 scratch/trace_run.py bench --all --json $o/bench-all.json > $o/bench-all.txt 2> $o/bench-all-trace.txt
kill $vm
t timeout 30 $W compare results/h100-session5-2026-11-27/call8-bench-all-dd677cf-h100.json $o/bench-all.json > $o/compare-dd677cf.txt 2>&1
t timeout 300 python3 -m pytest -q -m gpu tests/test_gpu_loop.py tests/test_isolate.py tests/test_gpu.py -k "not every_version" > $o/pytest-gpu.txt 2>&1
cd $OUT && tar czf c15.tgz c15 && rm -rf c15
