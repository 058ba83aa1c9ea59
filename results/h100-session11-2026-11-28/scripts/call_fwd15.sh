#!/usr/bin/env bash
# Next session, one device call (H100): attention_forward's head-major draft against 14 and cuDNN (9).
# Run as: WORKBENCH_COMMIT=$(git rev-parse --short HEAD) bash scratch/next/call_fwd15.sh (after source .gpu/activate.sh)
set -u
o=$OUT/f15; mkdir -p $o
W="python3 -m workbench"; export COLUMNS=150
python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > /dev/null 2>&1
cp scratch/next/attention_forward_15_head_major_draft.cu kernels/attention_forward/15_head_major.cu
timeout 200 $W run attention_forward 15 --no-torch > $o/run15.txt 2>&1
A="--no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch"
for v in 9 14 15 9 14 15; do timeout 100 $W run attention_forward $v $A > $o/fwd-$v-$SECONDS.txt 2>&1; done
timeout 120 $W profile attention_forward 14 15 --sizes B=16,T=1024,NH=12,HS=64 > $o/prof.txt 2>&1
grep -h "check \|^best" $o/run15.txt $o/fwd-*.txt
rm kernels/attention_forward/15_head_major.cu
cd $OUT && tar czf f15.tgz f15 && rm -rf f15
