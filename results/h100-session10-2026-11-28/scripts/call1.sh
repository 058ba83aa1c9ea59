#!/usr/bin/env bash
# session 10, call 1: backward 14's register-fetch variant (check, determinism, timing vs 14);
# cuBLASLt bias-gradient epilogues with an fp32 bias (probe); GEMM algorithms at B=32; bf16 step profile at B=32 and B=16
set -u
o=$OUT/c1; mkdir -p $o
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
# the dataset for the trainer, in the background while the kernels run
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
cp scratch/s10/29_regfetch.cu kernels/attention_backward/29_regfetch.cu
X=scratch/s9/bwd_check.py; D=kernels/attention_backward; SH=134144
{
for sz in "2 1024 3" "1 300 2" "1 37 1" "1 2048 2" "3 129 2"; do SHARED=$SH timeout 60 python3 $X check $D/29_regfetch.cu attention_backward14 $sz 2>&1 | tail -1; done
SHARED=$SH REPS=4 timeout 60 python3 $X det $D/29_regfetch.cu attention_backward14 4 1024 12 2>&1 | tail -1
for r in 1 2; do timeout 60 python3 $X bench $D/14_flash_wgmma_ordered_dq.cu attention_backward14 16 1024 12 2>&1 | tail -1; SHARED=$SH timeout 60 python3 $X bench $D/29_regfetch.cu attention_backward14 16 1024 12 2>&1 | tail -1; done
} > $o/regfetch.txt 2>&1
rm $D/29_regfetch.cu
wait
t timeout 120 python3 scratch/s10/bgrad_probe.py > $o/bgrad_probe.txt 2>&1
t timeout 90 env N=32768 python3 scratch/s10/gemm_algos.py > $o/gemm_algos_b32.txt 2>&1
t timeout 150 env PYTHONPATH="$PP" python3 scratch/s10/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
[ $SECONDS -lt 420 ] && t timeout 120 env PYTHONPATH="$PP" python3 scratch/s10/prof_train.py -b 16 > $o/prof-bf16-b16.txt 2>&1
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
