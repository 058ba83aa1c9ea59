#!/usr/bin/env bash
# session 18, call D (H200): the whole `pytest -m gpu` at HEAD (dgelu 10 + gelu 14 promoted), in three
# processes, then test_profile_gpu.py alone (ncu's occupancy reads wrong beside other GPU processes)
set -u
o=$OUT/cD; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240 --durations=12"
( t timeout 330 $P tests --ignore tests/test_gpu.py --ignore tests/test_gpu_trainer_runs.py --ignore tests/test_profile_gpu.py > $o/gpu_rest.txt 2>&1 ) &
( t timeout 330 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 330 $P tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
wait
t timeout 150 $P tests/test_profile_gpu.py > $o/gpu_profile.txt 2>&1
for f in $o/gpu_*.txt; do echo "== $(basename $f)"; grep -a "FAILED\|ERROR" $f | head -5; tail -n 1 $f; done; cat $o/times.txt
cd $OUT && tar czf cD.tgz cD && rm -rf cD
