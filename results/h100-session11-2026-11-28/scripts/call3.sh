#!/usr/bin/env bash
set -u
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty
o=$OUT/c3; mkdir -p $o
W="python3 -m workbench"; export COLUMNS=150
timeout 200 $W run attention_forward 15 --no-torch > $o/run15.txt 2>&1
grep -h "check \|^best\|regs" $o/run15.txt
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
for v in 15 14; do timeout 100 $W run attention_forward $v $A > $o/fwd-$v-$SECONDS.txt 2>&1; grep -h "^best" $o/fwd-$v-*.txt | tail -1 | sed "s/^/v$v /"; done
timeout 150 $W profile attention_forward 14 15 --sizes B=16,T=1024,NH=12,HS=64 > $o/prof.txt 2>&1
grep -i "occupancy\|duration\|warps\|throughput\|hit rate\|stall\|registers\|shared" $o/prof.txt | head -40
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
