#!/usr/bin/env bash
# session 23, call 5 (H100): call 3 again, with five interleaved pairs; call 3: the trainer at bf16 B=32 before (the session's starting kernels,
# a4d3b76's manifest and dgelu file, shipped as before_kernels.tgz, not committed) and after (qkv_bias_backward
# 3 and matmul_backward_dgelu 11 promoted), interleaved, PyTorch beside; B=16 after and PyTorch; the
# step's per-kernel profile; the new GPU test of the qkv bias gradient.
set -u
o=$OUT/c5; mkdir -p $o/train; S_DIR=results/h100-session23-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"; PP="$PWD${PYTHONPATH:+:$PYTHONPATH}"; start=$(date +%s)
left() { [ $(( $(date +%s) - start )) -lt $1 ]; }
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $o/gpu.txt 2>&1
python3 -m compileall -q -j 16 workbench references train tests > /dev/null 2>&1
# data/ is carried, made here by workbench prepro tinyshakespeare: .gpu-lean has no data
# before: this tree's kernels with a4d3b76's manifest and matmul_backward_dgelu.bf16.cu (the two files the
# session's promotions changed; before_kernels.tgz holds just them, to stay under the 64 MiB transfer)
rm -rf /tmp/after /tmp/before /tmp/b; cp -r train/kernels /tmp/after; cp -r train/kernels /tmp/before
mkdir -p /tmp/b && tar xzf before_kernels.tgz -C /tmp/b && cp /tmp/b/train/kernels/* /tmp/before/ && rm -f /tmp/before/qkv_bias_backward*
use() { rm -rf train/kernels; cp -r /tmp/$1 train/kernels; }
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S="--precision bf16 --steps 40 -v 0 -s 0 -b 32"
use before; tr warm_before $W train $S --steps 12
use after; tr warm_after $W train $S --steps 12
tr torch_1 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
for i in 1 2 3 4 5; do
  left 330 || break
  use before; tr before_$i $W train $S
  use after; tr after_$i $W train $S
done
use after
tr torch_2 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 30
left 420 && tr after_b16 $W train --precision bf16 --steps 40 -v 0 -s 0 -b 16
left 430 && tr torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps 40
left 470 && t timeout 60 env PYTHONPATH="$PP" PROF_STEPS=30 python3 results/h100-session20-2026-12-06/scripts/prof_train.py -b 32 > $o/prof-bf16-b32.txt 2>&1
# the GPU test of the qkv bias gradient ran in the first try of this call (c3-first-try)
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); n = os.path.basename(f)[:-5]
    print(n, round(j.get("median_ms") or 0, 2), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
cat $o/summary.txt; grep -a " ms " $o/prof-bf16-b32.txt | head -32; tail -n 12 $o/test_qkv_bias_gpu.txt; cat $o/times.txt
tar czf $OUT/c5.tgz -C $OUT c5
