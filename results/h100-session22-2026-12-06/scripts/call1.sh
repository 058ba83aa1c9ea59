#!/usr/bin/env bash
# session 22, call 1 (H100): what the residual add as the projection GEMMs' C and qkv's bias
# gradient as the weight GEMM's BGRADB epilogue would save at B=32 (exp_fuse.py), beside the
# kernels they would replace or keep (fused_residual_forward 6, layernorm_forward 10,
# matmul_backward_bias 8) timed by `workbench run` at the same shapes.
set -u
o=$OUT/c1; mkdir -p $o; S_DIR=results/h100-session22-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
t timeout 200 env PYTHONPATH="$PP" python3 $S_DIR/exp_fuse.py > $o/exp_fuse.txt 2>&1
R="--no-test-sizes --seeds 1 --no-torch --budget 1.0"
t timeout 90 $W run fused_residual_forward 6 --sizes B=32,T=1024,C=768 $R --json $o/run-fr6.json > $o/run-fr6.txt 2>&1
t timeout 90 $W run layernorm_forward 10 --sizes B=32,T=1024,C=768 $R --json $o/run-ln10.json > $o/run-ln10.txt 2>&1
t timeout 90 $W run matmul_backward_bias 8 --sizes B=32,T=1024,OC=2304 $R --json $o/run-mbb8.json > $o/run-mbb8.txt 2>&1
cat $o/exp_fuse.txt
for f in $o/run-*.txt; do echo "$(basename $f): $(grep -a -h 'best:' $f | cut -c1-140)"; done
cat $o/times.txt
