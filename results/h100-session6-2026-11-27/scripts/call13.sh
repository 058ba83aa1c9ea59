#!/usr/bin/env bash
# session 6, call 1: cold run first (traced), watch, nvcc -time, torch baselines alone, 4 families profiled, bench --all
set -u
o=$OUT/c13; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t env COLUMNS=200 python3 scratch/trace_run.py run layernorm_forward 4 > $o/run-cold-traced.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-warm1.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-warm2.txt 2>&1
t timeout 120 python3 scratch/watch_timing.py /tmp/wt > $o/watch.txt 2>&1
python3 - > /tmp/ln4.cu <<'P'
import sys; sys.path.insert(0,'.')
from workbench import compile as c; from pathlib import Path
print(c.source_for(Path('kernels/layernorm_forward/4_one_pass.cu')))
P
for i in 1 2 3; do nvcc -cubin -arch=sm_90 -O3 --use_fast_math -Ikernels/layernorm_forward -Ikernels/common /tmp/ln4.cu -o /tmp/ln4.cubin -time $o/nvcc-time.csv; done
printf 'extern "C" __global__ void k(float*x){x[0]=1;}\n' > /tmp/empty.cu
for i in 1 2 3; do nvcc -cubin -arch=sm_90 -O3 --use_fast_math /tmp/empty.cu -o /tmp/empty.cubin -time $o/nvcc-time-empty.csv; done
t timeout 120 python3 scratch/torch_probe.py > $o/torch-probe.txt 2>&1
mkdir -p $o/prof
t timeout 200 env WORKBENCH_CACHE=/tmp/wbc-4 WB_PROFILE_DIR=$o/prof PYTHONPATH="$PWD/scratch/prof:$PYTHONPATH" $W bench fused_classifier adamw attention_forward relu_attention_forward --json $o/bench-4.json > $o/bench-4.txt 2>&1
python3 - $o/prof > $o/prof-summary.txt 2>&1 <<'P'
import pstats, sys, glob
fs = glob.glob(sys.argv[1] + "/*.prof")
s = pstats.Stats(fs[0])
for f in fs[1:]: s.add(f)
s.sort_stats("cumulative").print_stats("torch|references|providers|check", 60)
s.sort_stats("tottime").print_stats(40)
P
rm -rf $o/prof
t timeout 260 env WORKBENCH_CACHE=/tmp/wbc-all $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
t timeout 30 $W compare results/h100-session5-2026-11-27/call8-bench-all-dd677cf-h100.json $o/bench-all.json > $o/compare.txt 2>&1
cd $OUT && tar czf c13.tgz c13 && rm -rf c13
