#!/usr/bin/env bash
# session 5, call 6: bench --all with the dear references in their own pool and 8 compile workers; vmstat beside
set -u
o=$OUT/c10; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
PP="$PWD:$PWD/scratch/refworkers${PYTHONPATH:+:$PYTHONPATH}"
{ df -h /tmp /dev/shm; free -g; cat /proc/sys/vm/dirty_ratio /proc/sys/vm/dirty_background_ratio; nproc; } > $o/host.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
vmstat -t 2 > $o/vmstat-a.txt 2>&1 & vm=$!
t timeout 260 $W bench --all --json $o/bench-a.json > $o/bench-a.txt 2>&1
kill $vm
for x in a; do t timeout 30 $W compare results/h100-daily-loop-speedups-2026-11-27/call3-bench-all-0db1124-pyc-h100.json $o/bench-$x.json > $o/compare-$x.txt 2>&1; done
cd $OUT && tar czf c10.tgz c10 && rm -rf c10
