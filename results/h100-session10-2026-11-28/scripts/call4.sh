#!/usr/bin/env bash
# session 10, call 4: attention_backward 15 (no prep kernel): NumPy checks, determinism, timing against 14, family check, cuDNN side by side, sanitizers
set -u
o=$OUT/c4; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
export COLUMNS=150
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
X=scratch/s10/bwd_check.py; D=kernels/attention_backward; V15=$D/15_flash_wgmma_ordered_dq_no_prep.cu
{
for sz in "2 1024 3" "1 300 2" "1 37 1" "1 2048 2" "3 129 2" "1 128 2" "1 1 1" "1 4096 1"; do NOPREP=1 timeout 60 python3 $X check $V15 attention_backward15 $sz 2>&1 | tail -1; done
for sz in "4 1024 12" "2 300 5" "1 2048 4"; do NOPREP=1 REPS=6 timeout 60 python3 $X det $V15 attention_backward15 $sz 2>&1 | tail -1; done
for r in 1 2; do timeout 60 python3 $X bench $D/14_flash_wgmma_ordered_dq.cu attention_backward14 16 1024 12 2>&1 | tail -1; NOPREP=1 timeout 60 python3 $X bench $V15 attention_backward15 16 1024 12 2>&1 | tail -1; done
} > $o/check15.txt 2>&1
t timeout 200 $W run attention_backward 15 --no-torch > $o/run15.txt 2>&1
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
for v in 9 15 14 9 15; do t timeout 100 $W run attention_backward $v $A > $o/attn-bwd-$v-$SECONDS.txt 2>&1; done
cat $o/attn-bwd-*.txt > $o/attn-bwd.txt
t timeout 200 $W sanitize attention_backward 15 --tool memcheck --tool racecheck > $o/sanitize15.txt 2>&1
# promote 15 (fallback: 10, kept from 14's entry) only if it passed everywhere and was faster than 14 in every run
best() { grep -h "^best:" $o/attn-bwd-$1-*.txt | sed -E 's/.*, ([0-9.]+) µs.*/\1/'; }
b14=$(best 14 | sort -n | head -1); b15=$(best 15 | sort -n | tail -1); echo "14 best $b14, 15 worst $b15" > $o/decision.txt
if grep -q "check   passed" $o/run15.txt && grep -q "2 of 2 (version, tool) runs clean" $o/sanitize15.txt && ! grep -q FAIL $o/check15.txt \
   && [ -n "$b14" ] && [ -n "$b15" ] && python3 -c "import sys; sys.exit(0 if $b15 < $b14 else 1)"; then
  echo promote >> $o/decision.txt
  t timeout 300 $W promote attention_backward 15 > $o/promote15.txt 2>&1
  tar czf $o/promoted.tgz train/kernels/attention_backward.bf16.cu train/kernels/attention_backward.bf16.fallback.cu train/kernels/manifest.json
fi
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
