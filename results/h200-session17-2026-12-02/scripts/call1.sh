#!/usr/bin/env bash
# session 17, call 1 (H200): the full GPU suite at HEAD (three processes) beside the owed sanitizer
# runs (the 288-tile test size on gelu 12 and matmul_forward 10; gelu 9, 11 and matmul_forward 9),
# then the five-stage draft (13) against 12 and cuBLASLt, then the bf16 step's kernel profile at
# B=16 and B=32 (each shape's GEMM tuning cached first by a short run)
set -u
o=$OUT/c1; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240 --durations=12"
( t timeout 330 $P tests/test_gpu.py > $o/gpu_versions.txt 2>&1 ) &
( t timeout 330 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
( t timeout 330 $P tests --ignore tests/test_gpu.py --ignore tests/test_gpu_trainer_runs.py > $o/gpu_rest.txt 2>&1 ) &
for fv in "matmul_forward_gelu 12" "matmul_forward 10" "matmul_forward_gelu 9" "matmul_forward_gelu 11" "matmul_forward 9"; do
  ( t timeout 300 $W sanitize $fv --timeout 250 > "$o/sanitize-${fv// /-}.txt" 2>&1 ) &
done
wait
cp scratch/s17/13_pingpong_five_stages.cu kernels/matmul_forward_gelu/
t timeout 100 $W run matmul_forward_gelu 13 --no-torch > $o/run-g13.txt 2>&1
t timeout 150 $W bench matmul_forward_gelu --sizes B=16,T=1024 --no-test-sizes --no-torch --json $o/bench-g-b16.json > $o/bench-g-b16.txt 2>&1
rm kernels/matmul_forward_gelu/13_pingpong_five_stages.cu
if [ $SECONDS -lt 420 ]; then
  t timeout 60 $W train --precision bf16 -b 32 --steps 3 -v 0 -s 0 > $o/tune-b32.txt 2>&1
  t timeout 100 env PYTHONPATH="$PP" python3 scratch/s17/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
fi
[ $SECONDS -lt 500 ] && t timeout 80 env PYTHONPATH="$PP" python3 scratch/s17/prof_train.py -b 16 > $o/prof-bf16-b16.txt 2>&1
grep -a -h "runs clean\|not clean" $o/sanitize-*.txt; tail -n 2 $o/gpu_*.txt
grep -a -h "│ *1[0-3] │\|│  5 │" $o/bench-g-b16.txt | cut -c1-170
cat $o/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
