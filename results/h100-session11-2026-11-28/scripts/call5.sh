#!/usr/bin/env bash
set -u
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty
o=$OUT/c5; mkdir -p $o
W="python3 -m workbench"; export COLUMNS=150
F=kernels/attention_forward/15_flash_wgmma_one_warpgroup_128_keys.cu
for vg in 16:192 17:48 18:12 19:6; do v=${vg%%:*}; g=${vg##*:}; sed "s/^#define HEAD_GROUP 24 /#define HEAD_GROUP $g /" $F > kernels/attention_forward/${v}_g$g.cu; grep -c "HEAD_GROUP $g " kernels/attention_forward/${v}_g$g.cu; done
timeout 200 $W run attention_forward 15 --no-torch > $o/run15.txt 2>&1
grep -h "check \|^best\|regs" $o/run15.txt
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
for r in 1 2; do for v in 9 15 16 17 18 19; do timeout 100 $W run attention_forward $v $A > $o/fwd-$v-$SECONDS.txt 2>&1; grep -h "^best" $o/fwd-$v-*.txt | tail -1 | sed "s/^/v$v /"; done; done
timeout 150 $W profile attention_forward 15 16 --sizes B=16,T=1024,NH=12,HS=64 > $o/prof.txt 2>&1
grep -i "duration\|DRAM\|hit rate\|stall" $o/prof.txt | head -12
rm kernels/attention_forward/1[6-9]_g*.cu
cd $OUT && tar czf c5.tgz c5 && rm -rf c5
