#!/usr/bin/env bash
set -u
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty
o=$OUT/c2; mkdir -p $o
W="python3 -m workbench"; export COLUMNS=150
timeout 200 $W run attention_forward 15 --no-torch > $o/run15.txt 2>&1
grep -h "check \|^best\|regs" $o/run15.txt
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
if grep -q "check   passed" $o/run15.txt; then
  for v in 9 14 15 9 14 15; do timeout 100 $W run attention_forward $v $A > $o/fwd-$v-$SECONDS.txt 2>&1; grep -h "^best" $o/fwd-$v-*.txt | tail -1 | sed "s/^/v$v /"; done
  timeout 200 $W sanitize attention_forward 15 > $o/san15.txt 2>&1; tail -5 $o/san15.txt
fi
for B in 16 32; do timeout 150 $W run matmul_backward_dgelu 5 --no-test-sizes --sizes B=$B,T=1024,C=3072,OC=768 --no-torch > $o/dgelu5-b$B.txt 2>&1; grep -h "check " $o/dgelu5-b$B.txt; done
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
