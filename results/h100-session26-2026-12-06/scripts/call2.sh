#!/usr/bin/env bash
# session 26, calls 2 and 5 (H100): the whole `pytest -m gpu` at this tree (three processes, then
# test_profile_gpu.py alone).
set -u
o=$OUT; mkdir -p $o; S_DIR=results/h100-session26-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
start=$(date +%s); left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=12"
( t timeout 290 $P --timeout 280 tests --ignore tests/test_gpu.py --ignore tests/test_gpu_trainer_runs.py --ignore tests/test_profile_gpu.py > $o/gpu_rest.txt 2>&1 ) &
( t timeout 290 $P --timeout 280 tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 290 $P --timeout 280 tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
wait
left 540 && t timeout 40 $P --timeout 35 tests/test_profile_gpu.py > $o/gpu_profile.txt 2>&1
for f in $o/gpu_*.txt; do echo "== $(basename $f)"; grep -a "FAILED\|ERROR" $f | head -8; tail -n 1 $f; done
cat $o/times.txt
