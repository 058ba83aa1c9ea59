#!/usr/bin/env bash
# session 17, call 5 (H200, the last ~220 s of device time): matmul_backward_dgelu 9 promoted on the
# machine, then the step's GPU tests with it (the PyTorch comparison in fp32, bf16 against fp32 over
# 100 steps, resume, --recompute, deterministic, micro-steps), two processes
set -u
o=$OUT/c5; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit) COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
t timeout 60 $W promote matmul_backward_dgelu 9 > $o/promote-d9.txt 2>&1 && tar czf $o/tk_D9.tgz train/kernels
wait
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 150"
( t timeout 160 $P tests/test_gpu_train.py > $o/gpu_train.txt 2>&1 ) &
( t timeout 160 $P tests/test_gpu_trainer_runs.py -k "bf16_follows or resumed or deterministic or recompute or micro_steps or one_rank" > $o/gpu_trainer_runs.txt 2>&1 ) &
wait
tail -n 1 $o/gpu_*.txt; cat $o/times.txt
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
