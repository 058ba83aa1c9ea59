#!/usr/bin/env bash
# session 4, call 1: cold run traced at 1428cc4+, warm runs, the watch, NVRTC survey, profiled bench of 4 families,
# the loop tests, sanitize dgelu 3
set -u
o=$OUT/c1; mkdir -p $o/prof
cd $(dirname $0)/..
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t timeout 60 env PYTHONPATH="$PP" python3 scratch/trace_run.py run layernorm_forward 4 > $o/cold-trace.txt 2>&1
for i in 1 2; do t timeout 60 $W run layernorm_forward 4 > $o/warm$i.txt 2>&1; done
t timeout 90 python3 scratch/watch_timing.py /tmp/w > $o/watch.txt 2>&1
t timeout 150 python3 scratch/nvrtc_survey.py > $o/nvrtc.txt 2>&1
t timeout 150 env WB_PROFILE_DIR=$o/prof PYTHONPATH="$PWD/scratch/prof:$PP" $W bench layernorm_forward attention_forward matmul_backward_dgelu matmul_forward --json $o/bench4-prof.json > $o/bench4-prof.txt 2>&1
t timeout 100 $W bench layernorm_forward attention_forward matmul_backward_dgelu matmul_forward --json $o/bench4.json > $o/bench4.txt 2>&1
t timeout 120 python3 -m pytest -m gpu -q -rs -p no:cacheprovider tests/test_gpu_loop.py > $o/pytest-loop.txt 2>&1
t timeout $(( 570 - SECONDS )) $W sanitize matmul_backward_dgelu 3 --tool memcheck --tool racecheck --parallel 8 --timeout 140 > $o/sanitize.txt 2>&1
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
