#!/usr/bin/env bash
# session 12, call 2 (H200): one graph replay of the bf16 step traced (B=16, B=32): kernels, memsets, gaps;
# the step's GEMM shapes against cuBLASLt's first 8 candidates at B=16 (random operands)
set -u
o=$OUT/c2; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=150
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
t timeout 120 env PYTHONPATH="$PP" python3 scratch/s12/trace_train.py $o/trace-b16.json -b 16 > $o/trace-b16.txt 2>&1
t timeout 120 env PYTHONPATH="$PP" python3 scratch/s12/trace_train.py $o/trace-b32.json -b 32 > $o/trace-b32.txt 2>&1
t timeout 120 env N=16384 python3 scratch/s12/gemm_algos.py > $o/gemm_algos_b16.txt 2>&1
rm -f $o/*.trace.json
tail -30 $o/trace-b16.txt; tail -30 $o/trace-b32.txt; cat $o/gemm_algos_b16.txt | cut -c1-250; cat $o/times.txt
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
