#!/usr/bin/env bash
# session 16, call 5 (H200): the new multi-tile test size (288 tiles of 128 x 128, so persistent
# blocks take two or three and the ping-pong's second warpgroup and turns run) under the check and
# all four sanitizers for matmul_forward_gelu 12 and matmul_forward 10.
set -u
o=$OUT/c5; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
( t timeout 50 $W sanitize matmul_forward_gelu 12 --timeout 45 > $o/sanitize-g12.txt 2>&1 ) &
( t timeout 50 $W sanitize matmul_forward 10 --timeout 45 > $o/sanitize-f10.txt 2>&1 ) &
( t timeout 50 $W run matmul_forward_gelu 12 --no-torch --seeds 2 > $o/run-g12.txt 2>&1 ) &
wait
grep -a -h "runs clean\|not clean\|errors\|timed" $o/sanitize-*.txt | tail -6 | cut -c1-200
grep -a -h "check " $o/run-g12.txt | cut -c1-200
cat $o/times.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
