#!/usr/bin/env bash
set -u
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty
W="python3 -m workbench"; export COLUMNS=150
cp scratch/s11/16_fetch_behind_s.cu kernels/attention_forward/16_fetch_behind_s.cu
timeout 60 $W run attention_forward 16 --no-torch > $OUT/run16.txt 2>&1; grep -h "check \|regs" $OUT/run16.txt
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
for v in 9 15 16 9 15 16 9 15 16; do timeout 40 $W run attention_forward $v $A > $OUT/f.txt 2>&1; grep -h "^best" $OUT/f.txt | sed "s/^/v$v /"; done
rm kernels/attention_forward/16_fetch_behind_s.cu $OUT/f.txt
