#!/usr/bin/env bash
# For the next session (H200 or H100), never run: promote matmul_backward_dgelu 9 (gelu' through the
# hardware tanh; 8% / 11% faster than 8 alone at B=16 / 32 in session 17's call 4) and re-verify the
# step with it, against PyTorch in the same call. Run from the repository root with .gpu carried.
set -u
o=$OUT/cn; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
wait
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 120 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 50 -v 0 -s 0"
cp -r train/kernels /tmp/tk_D
t timeout 120 $W promote matmul_backward_dgelu 9 > $o/promote-d9.txt 2>&1 && cp -r train/kernels /tmp/tk_D9
use() { rm -rf train/kernels && cp -r /tmp/tk_$1 train/kernels; }
tr warm_b16 $W train $S -b 16   # the machine's first run (GEMM tuning, a cold GPU): not compared
for b in 16 32; do
  for set in D D9 D D9; do [ -d /tmp/tk_$set ] && use $set && tr ${set}_b${b}_$SECONDS $W train $S -b $b; done
  tr torch_b$b python3 -m train.torch_baseline --precision bf16 -b $b --steps 50
done
use D9
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240"
( t timeout 250 $P tests/test_gpu_train.py > $o/gpu_train.txt 2>&1 ) &
( t timeout 250 $P tests/test_gpu_trainer_runs.py > $o/gpu_trainer_runs.txt 2>&1 ) &
wait
tar czf $o/tk_D9.tgz train/kernels
tail -n 1 $o/gpu_*.txt; cat $o/times.txt
cd $OUT && tar czf cn.tgz cn && rm -rf cn
