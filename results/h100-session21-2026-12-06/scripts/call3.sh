#!/usr/bin/env bash
# session 21, call 3 (H100): call 2 measured --side-stream 0.38 ms a step faster at B=32 (medians,
# 4 and 5 runs) and cuBLASLt's GELU epilogue (matmul_forward_gelu 5) 15.6 us a layer faster than
# 14 there. Now: the bias gradients on the side stream too, the side stream the default, version 5
# promoted; the bars against PyTorch in this call (B=32 and B=16, ours interleaved, --one-stream
# beside); fp32+TF32 B=4 side against one; then the GPU tests this change touches.
set -u
o=$OUT/c3; mkdir -p $o/train; S_DIR=results/h100-session21-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
t timeout 150 $W promote matmul_forward_gelu 5 > $o/promote.txt 2>&1
tar czf $o/kernels.tgz train/kernels
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0"
tr warm $W train $S -b 32 --steps 10
tr torch_b32_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
tr P_b32_1 $W train $S -b 32
tr one_b32_1 $W train $S -b 32 --one-stream
tr P_b32_2 $W train $S -b 32
tr torch_b32_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
tr P_b32_3 $W train $S -b 32
tr one_b32_2 $W train $S -b 32 --one-stream
tr P_b32_4 $W train $S -b 32
tr torch_b16_1 python3 -m train.torch_baseline --precision bf16 -b 16 --steps 50
tr P_b16_1 $W train $S -b 16
tr P_b16_2 $W train $S -b 16
tr F_b4_side $W train --precision fp32 --steps 40 -v 0 -s 0 -b 4
tr F_b4_one $W train --precision fp32 --steps 40 -v 0 -s 0 -b 4 --one-stream
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt; tail -n 4 $o/promote.txt
P="python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 200"
t timeout 230 $P tests/test_gpu_trainer_runs.py -k "side_stream or bf16_follows_fp32" > $o/gpu_runs.txt 2>&1
t timeout 200 $P tests/test_gpu_train.py > $o/gpu_train.txt 2>&1
tail -n 3 $o/gpu_runs.txt $o/gpu_train.txt; grep -a "^error\|Error" $o/train-log.txt | head -5; cat $o/times.txt
cd $OUT && tar czf c3.tgz c3 && rm -rf c3
