#!/usr/bin/env bash
# session 20, call 5 (H100): the whole `pytest -m gpu` at HEAD (matmul_forward_gelu 16 in, the remote arrive changed), in three
# processes, then test_profile_gpu.py alone (ncu's occupancy reads wrong beside other GPU processes)
set -u
o=$OUT/c5; mkdir -p $o
export WORKBENCH_COMMIT=$(cat results/h100-session20-2026-12-06/scripts/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 220 --durations=12"
( t timeout 230 $P tests --ignore tests/test_gpu.py --ignore tests/test_gpu_trainer_runs.py --ignore tests/test_profile_gpu.py > $o/gpu_rest.txt 2>&1 ) &
( t timeout 230 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 230 $P tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
wait
t timeout 70 $P tests/test_profile_gpu.py > $o/gpu_profile.txt 2>&1
for f in $o/gpu_*.txt; do echo "== $(basename $f)"; grep -a "FAILED\|ERROR" $f | head -5; tail -n 1 $f; done; cat $o/times.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
