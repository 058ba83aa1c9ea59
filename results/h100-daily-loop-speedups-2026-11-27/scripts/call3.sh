#!/usr/bin/env bash
# session 4, call 3: cold (traced) and warm run, watch, bench --all as the machine comes (no .pyc: the device sets
# PYTHONDONTWRITEBYTECODE) + compare, the loop tests, then compileall and bench --all again
set -u
o=$OUT/c3; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t timeout 60 env PYTHONPATH="$PP" python3 scratch/trace_run.py run layernorm_forward 4 > $o/cold-trace.txt 2>&1
for i in 1 2; do t timeout 60 $W run layernorm_forward 4 > $o/warm$i.txt 2>&1; done
t timeout 90 python3 scratch/watch_timing.py /tmp/w > $o/watch.txt 2>&1
t timeout 250 $W bench --all --json $o/bench-all.json > $o/bench-all.txt 2>&1
t timeout 30 $W compare results/gpu-loop-fusions-closeout-2026-11-27/bench-all-after-6fac2c7-h100.json $o/bench-all.json > $o/compare.txt 2>&1
t timeout 60 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_loop.py > $o/pytest-loop.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
[ $SECONDS -lt 330 ] && t timeout $(( 580 - SECONDS )) $W bench --all --json $o/bench-all-pyc.json > $o/bench-all-pyc.txt 2>&1
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
