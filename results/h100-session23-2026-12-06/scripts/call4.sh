#!/usr/bin/env bash
# session 23, call 4 (H100): the whole `pytest -m gpu` at the session's promoted set (three
# processes, then test_profile_gpu.py alone, as session 22's call 4).
set -u
o=$OUT/c4; mkdir -p $o; S_DIR=results/h100-session23-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train tests > /dev/null 2>&1
# data/ is carried, made here by workbench prepro tinyshakespeare: .gpu-lean has no data
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=12"
( t timeout 370 $P --timeout 360 tests --ignore tests/test_gpu.py --ignore tests/test_gpu_trainer_runs.py --ignore tests/test_profile_gpu.py > $o/gpu_rest.txt 2>&1 ) &
( t timeout 370 $P --timeout 360 tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 370 $P --timeout 360 tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
wait
t timeout 70 $P --timeout 60 tests/test_profile_gpu.py > $o/gpu_profile.txt 2>&1
for f in $o/gpu_*.txt; do echo "== $(basename $f)"; grep -a "FAILED\|ERROR" $f | head -8; tail -n 1 $f; done
cat $o/times.txt
tar czf $OUT/c4.tgz -C $OUT c4
