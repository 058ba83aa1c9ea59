#!/usr/bin/env bash
# session 6, call 4: bench --all first on a fresh machine, plain (no trace wrapper), with top snapshots; compare
set -u
o=$OUT/c16; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
(while true; do date +%T; top -b -n 2 -d 2 -o %CPU -w 250 | awk '/^top -/{n++} n==2' | sed -n 7,22p; sleep 6; done) > $o/top.txt 2>&1 & tp=$!
t timeout 250 $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
kill $tp
t timeout 30 $W compare results/h100-session5-2026-11-27/call8-bench-all-dd677cf-h100.json $o/bench-all.json > $o/compare-dd677cf.txt 2>&1
cd $OUT && tar czf c16.tgz c16 && rm -rf c16
