#!/usr/bin/env bash
# session 5, call 2: bench --all with the references' new order and float32 draws + compare; the bf16 step's kernel profile
set -u
o=$OUT/c6; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
df -h /tmp > $o/df.txt; nproc >> $o/df.txt
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 280 $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
t timeout 30 $W compare results/h100-daily-loop-speedups-2026-11-27/call3-bench-all-0db1124-pyc-h100.json $o/bench-all.json > $o/compare.txt 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
t timeout 150 env PYTHONPATH="$PP" python3 scratch/prof_train.py -b 16 > $o/prof-bf16-b16.txt 2>&1
[ $SECONDS -lt 450 ] && t timeout 120 env PYTHONPATH="$PP" python3 scratch/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
cd $OUT && tar czf c6.tgz c6 && rm -rf c6
