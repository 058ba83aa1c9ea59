#!/usr/bin/env bash
# session 16, call 1 (H200): session 15's unrun probe (the main-loop variant that faulted at its
# ring's exact shared memory); the main-loop sweep (tile width, stages, map placement, L2
# promotion) beside cuBLASLt at the fc shape; matmul_forward_gelu 9 (five stages) checked and
# benched; then the whole GPU suite in three processes side by side.
set -u
o=$OUT/c1; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,driver_version --format=csv > $o/gpu.txt 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
( cd scratch/s15/dbg
  t timeout 40 python3 once.py ml_192x4.cu 216128 > $o/probe-big.txt 2>&1
  t timeout 40 python3 once.py ml_192x4.cu 164928 > $o/probe-small.txt 2>&1
  t timeout 60 compute-sanitizer --tool memcheck python3 once.py ml_192x4.cu 164928 > $o/probe-memcheck-small.txt 2>&1 )
t timeout 150 env JSON=$o/sweep.json python3 scratch/s16/sweep.py > $o/sweep.txt 2>&1
t timeout 90 $W run matmul_forward_gelu 9 --json $o/run-g9.json > $o/run-g9.txt 2>&1
t timeout 150 $W bench matmul_forward_gelu --sizes B=16,T=1024 --no-test-sizes --no-torch --json $o/bench-g-b16.json > $o/bench-g-b16.txt 2>&1
wait
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240 --durations=12"
( t timeout 330 $P tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
( t timeout 330 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 330 $P tests --ignore tests/test_gpu.py --ignore tests/test_gpu_trainer_runs.py > $o/gpu_rest.txt 2>&1 ) &
wait
for f in probe-big probe-small probe-memcheck-small; do echo "== $f"; grep -a -v "^\s*$" $o/$f.txt | grep -v -i "warn" | head -12 | cut -c1-200; done
cat $o/sweep.txt | cut -c1-200
grep -a -h "check \|│ [5789] │\|failed\|FAIL" $o/run-g9.txt $o/bench-g-b16.txt | cut -c1-200 | tail -14
for f in gpu_versions gpu_trainer_runs gpu_rest; do echo "== $f"; grep -a -h "passed\|failed\|FAILED\|Error" $o/$f.txt | tail -6 | cut -c1-250; done
cat $o/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
