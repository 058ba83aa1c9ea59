#!/usr/bin/env bash
# session 24, call 1 (H100): matmul_forward 11 checked (test sizes, 3 seeds) and promoted (the files
# come back in promoted.tgz); the GPU test that the lm head then does not read its bias; the trainer at
# bf16 B=32 and B=16 before (HEAD's manifest, version 8) and after (version 11), interleaved, PyTorch
# beside; cuBLASLt's bias epilogue timed at the step's other forward GEMM shapes (exp_bias.py).
set -u
o=$OUT/c1; mkdir -p $o/train; S_DIR=results/h100-session24-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; start=$(date +%s)
left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train tests > /dev/null 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
t timeout 150 $W run matmul_forward 11 --seeds 3 --budget 0.5 --json $o/run-mf-11.json > $o/run-mf-11.txt 2>&1
rm -rf /tmp/before /tmp/after; cp -r train/kernels /tmp/before
t timeout 240 $W promote matmul_forward 11 > $o/promote-mf.txt 2>&1
cp -r train/kernels /tmp/after
tar czf $OUT/promoted.tgz train/kernels/manifest.json train/kernels/matmul_forward*.cu
t timeout 200 python3 -m pytest -q -x tests/test_gpu_train.py -k "zero_bias" -p no:cacheprovider > $o/test-zero-bias.txt 2>&1
use() { rm -rf train/kernels; cp -r /tmp/$1 train/kernels; }
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0 -b 32"
use before; tr warm_before $W train $S --steps 12
use after; tr warm_after $W train $S --steps 12
tr torch_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
for i in 1 2 3 4; do
  left 330 || break
  use before; tr before_$i $W train $S
  use after; tr after_$i $W train $S
done
tr torch_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 30
S16="--precision bf16 --steps 40 -v 0 -s 0 -b 16"
for i in 1 2; do
  left 440 || break
  use before; tr b16_before_$i $W train $S16
  use after; tr b16_after_$i $W train $S16
done
left 470 && tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps 40
use after
left 530 && t timeout 50 python3 $S_DIR/exp_bias.py > $o/exp-bias.txt 2>&1
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt; tail -n 5 $o/test-zero-bias.txt; tail -n 25 $o/promote-mf.txt; cat $o/exp-bias.txt; cat $o/times.txt
tar czf $OUT/c1.tgz -C $OUT c1
