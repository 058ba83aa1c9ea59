#!/usr/bin/env bash
# session 15, call 4 (H200): why matmul_forward_gelu 7's main loop runs at ~370 TFLOP/s: Nsight Compute on
# 5 and 7 at B=16, and the main loop alone at 3-5 stages and 192 / 256 columns (time7.py).
set -u
o=$OUT/c4; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=200
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
t timeout 120 python3 scratch/s15/dbg/time7.py > $o/time7.txt 2>&1
t timeout 300 $W profile matmul_forward_gelu 5 7 --sizes B=16,T=1024 --timeout 250 --json $o/prof.json > $o/prof.txt 2>&1
grep -v Warn $o/time7.txt | grep median; grep -a -v "^\s*$" $o/prof.txt | cut -c1-200 | head -70
cat $o/times.txt
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
