#!/usr/bin/env bash
# session 6, call 7: a third cold run first on a fresh machine (as lent), a warm run, the loop and profile GPU tests at the final code
set -u
o=$OUT/c19; mkdir -p $o
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-cold-as-lent.txt 2>&1
t env COLUMNS=200 $W run layernorm_forward 4 > $o/run-warm1.txt 2>&1
t timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu_loop.py tests/test_profile_gpu.py tests/test_isolate.py > $o/pytest-gpu.txt 2>&1
cd $OUT && tar czf c19.tgz c19 && rm -rf c19
