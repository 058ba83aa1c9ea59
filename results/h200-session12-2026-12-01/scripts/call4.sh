#!/usr/bin/env bash
# session 12, call 4 (H200): the no-workspace GEMM versions promoted one by one, the trainer at
# B=16 and B=32 against PyTorch at each stage (same call); the faster matmul_backward kept; then
# the GPU tests of the trainer and of the changed families
set -u
o=$OUT/c4; mkdir -p $o/train $o/kernels
export WORKBENCH_COMMIT=$(cat scratch/commit)-dirty COLUMNS=150
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; }
W="python3 -m workbench"
t python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train > $o/compileall.txt 2>&1
t timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1
run1() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
S=30
pair() { run1 $1_b16 $W train --precision bf16 -b 16 --steps $S -v 0 -s 0; run1 $1_b32 $W train --precision bf16 -b 32 --steps $S -v 0 -s 0; }
pair a_head
t timeout 120 $W promote matmul_forward 7 > $o/promote.txt 2>&1
t timeout 120 $W promote matmul_forward_gelu 4 >> $o/promote.txt 2>&1
pair b_fwd
run1 torch_b16 python3 -m train.torch_baseline --precision bf16 -b 16 --steps $S
t timeout 120 $W promote matmul_backward 3 >> $o/promote.txt 2>&1
pair c_bwd3
cp train/kernels/manifest.json train/kernels/matmul_backward.bf16.cu $o/kernels/ ; mv $o/kernels/manifest.json $o/kernels/manifest.bwd3.json; mv $o/kernels/matmul_backward.bf16.cu $o/kernels/matmul_backward.bf16.bwd3.cu
t timeout 120 $W promote matmul_backward 4 >> $o/promote.txt 2>&1
pair d_bwd4
run1 torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps $S
pair e_bwd4
python3 - $o/train > $o/summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f)); n = os.path.basename(f)[:-5]
    tps = d.get("median_tokens_per_s") or d.get("tokens_per_s")
    print(f"{n:14s} {d.get('median_ms'):8.3f} ms {tps:12,.0f} tok/s  mfu {d.get('median_mfu')}")
PY
cat $o/summary.txt
# keep 3 unless 4 is faster at both batch sizes (same call, two runs of 4)
keep=$(python3 - $o/train <<'PY'
import json, sys
d = lambda n: json.load(open(f"{sys.argv[1]}/{n}.json"))["median_ms"]
four = all(min(d(f"d_bwd4_b{b}"), d(f"e_bwd4_b{b}")) < d(f"c_bwd3_b{b}") for b in (16, 32))
print(4 if four else 3)
PY
)
echo "keeping matmul_backward $keep" | tee -a $o/summary.txt
[ "$keep" = 3 ] && t timeout 120 $W promote matmul_backward 3 >> $o/promote.txt 2>&1
tail -3 $o/promote.txt
tar czf $o/kernels/promoted.tgz train/kernels
set -o pipefail
t timeout 330 python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 240 --durations=10 tests/test_gpu_train.py tests/test_gpu_trainer_runs.py tests/test_gpu.py -k "train or trainer or Trainer or library or matmul_forward or matmul_backward-" 2>&1 | tee $o/gpu_tests.txt | tail -25
cat $o/times.txt | tail -30
cd $OUT && tar czf c4.tgz c4 && rm -rf c4
