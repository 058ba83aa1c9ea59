#!/usr/bin/env bash
# For the next session (H200 or H100), never run: session 16's owed checks, then the five-stage draft.
# Copy next/13_pingpong_five_stages.cu.txt to kernels/matmul_forward_gelu/13_pingpong_five_stages.cu first.
set -u
o=$OUT/cn; mkdir -p $o/train
export COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
# 1. the 288-tile test size (733db1b) under the check and all four sanitizers, and the owed sanitizer runs
( t timeout 200 $W sanitize matmul_forward_gelu 12 --timeout 150 > $o/sanitize-g12.txt 2>&1 ) &
( t timeout 200 $W sanitize matmul_forward 10 --timeout 150 > $o/sanitize-f10.txt 2>&1 ) &
( t timeout 200 $W sanitize matmul_forward_gelu 9 --timeout 150 > $o/sanitize-g9.txt 2>&1 ) &
( t timeout 200 $W sanitize matmul_forward_gelu 11 --timeout 150 > $o/sanitize-g11.txt 2>&1 ) &
( t timeout 200 $W sanitize matmul_forward 9 --timeout 150 > $o/sanitize-f9.txt 2>&1 ) &
wait
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240"
t timeout 300 $P tests/test_gpu.py -k "matmul_forward" > $o/gpu_matmul.txt 2>&1
# 2. the draft against 12 and cuBLASLt (5), then the trainer if it wins
t timeout 100 $W run matmul_forward_gelu 13 --no-torch > $o/run-g13.txt 2>&1
t timeout 150 $W bench matmul_forward_gelu --sizes B=16,T=1024 --no-test-sizes --no-torch --json $o/bench-g-b16.json > $o/bench-g-b16.txt 2>&1
grep -a -h "runs clean\|not clean" $o/sanitize-*.txt; tail -2 $o/gpu_matmul.txt
grep -a -h "│ *1[0-3] │\|│  5 │" $o/bench-g-b16.txt | cut -c1-170
cat $o/times.txt
cd $OUT && tar czf cn.tgz cn && rm -rf cn
