#!/usr/bin/env bash
# session 5, call 8: bench --all first on the fresh machine, references niced to 15
set -u
o=$OUT/c12; mkdir -p $o
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
cd $OUT && tar czf c12.tgz c12 && rm -rf c12
