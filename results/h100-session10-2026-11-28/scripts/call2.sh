#!/usr/bin/env bash
# session 10, call 2: the tuning test; ours (--tune-gemms on / off) against PyTorch at B=16 and B=32, one call
set -u
o=$OUT/c2; mkdir -p $o/train
export WORKBENCH_COMMIT=$(cat scratch/commit)
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,driver_version --format=csv > $o/gpu.txt 2>&1
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
t timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_gpu.py -k "tuned or library" > $o/pytest-tuning.txt 2>&1
tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=30
tr torch_bf16_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
tr ours_bf16_b16_tuned $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
tr ours_bf16_b16_untuned $W train --precision bf16 -b 16 --steps $S -v 0 -s 0 --no-tune-gemms
tr torch_bf16_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
tr ours_bf16_b32_tuned $W train --precision bf16 -b 32 --steps $S -v 0 -s 0
tr ours_bf16_b32_untuned $W train --precision bf16 -b 32 --steps $S -v 0 -s 0 --no-tune-gemms
tr ours_bf16_b16_tuned_2 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:28s} {d.get('median_ms'):8.2f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
    for g in d.get("gemm_tuning", []): print("    ", g)
PY
cd $OUT && tar czf c2.tgz c2 && rm -rf c2
