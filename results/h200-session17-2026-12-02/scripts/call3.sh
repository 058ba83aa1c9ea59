#!/usr/bin/env bash
# session 17, call 3 (H200), matmul_backward_dgelu 8 promoted: the step's kernel profile at B=16 and
# 32; Nsight Compute on dgelu 8 against 7 at B=16; racecheck probes (call 2's internal sanitizer
# error); then the step's GPU tests and both fused families' checks, in three processes
set -u
o=$OUT/c3; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
wait
t timeout 60 $W train --precision bf16 -b 32 --steps 3 -v 0 -s 0 > $o/tune-b32.txt 2>&1
t timeout 80 env PYTHONPATH="$PP" python3 scratch/s17/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
t timeout 80 env PYTHONPATH="$PP" python3 scratch/s17/prof_train.py -b 16 > $o/prof-bf16-b16.txt 2>&1
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240"
( t timeout 200 env PYTHONPATH="$PP" python3 scratch/s17/racecheck_probe.py $o > $o/racecheck-probe.txt 2>&1 ) &
( t timeout 260 $P tests/test_gpu_train.py > $o/gpu_train.txt 2>&1 ) &
( t timeout 260 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 260 $P tests/test_gpu.py -k "matmul_backward_dgelu or matmul_forward_gelu" > $o/gpu_versions.txt 2>&1 ) &
wait
[ $SECONDS -lt 430 ] && t timeout 100 $W profile matmul_backward_dgelu 8 --sizes B=16,T=1024 --json $o/ncu-d8.json > $o/ncu-d8.txt 2>&1
cat $o/racecheck-probe.txt; grep -a "matmul_backward_dgelu\|dgelu_in_place" $o/prof-bf16-b*.txt | cut -c1-120; grep -a "average step" $o/prof-bf16-b*.txt
tail -n 1 $o/gpu_*.txt; cat $o/times.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
