#!/usr/bin/env bash
# session 20, call 1 (H100): matmul_forward_gelu 16 and matmul_backward_dgelu 11 (ping-pong in
# clusters of two sharing the weight's tiles by multicast) checked at every size set, sanitized,
# timed at B=32 (twice, interleaved) and B=16 against 14 / 10 and cuBLASLt (5 / 6), with a
# device-only five-stage variant of 16 (variants/17); the clusters the H100 holds at once; then,
# if both pass, both promoted on the device and the trainer's bf16 B=32 / B=16 against PyTorch.
set -u
o=$OUT/c1; mkdir -p $o/train; S_DIR=results/h100-session20-2026-12-06/scripts
export WORKBENCH_COMMIT=$(cat $S_DIR/commit)+ COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv > $o/gpu.txt 2>&1
cp results/h100-session20-2026-12-06/variants/17_pairs_five_stages.cu kernels/matmul_forward_gelu/
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
( timeout 60 $W prepro tinyshakespeare --input .gpu/data/tinyshakespeare/input.txt > $o/prepro.txt 2>&1 ) &
for fv in "matmul_forward_gelu 16" "matmul_forward_gelu 17" "matmul_backward_dgelu 11"; do
  set -- $fv
  t timeout 150 $W run $1 $2 --no-torch --json $o/check-$1-$2.json > $o/check-$1-$2.txt 2>&1
  echo "$1 $2 check rc=$?" >> $o/status.txt
  t timeout 200 $W sanitize $1 $2 --timeout 150 > $o/sanitize-$1-$2.txt 2>&1
  echo "$1 $2 sanitize rc=$?" >> $o/status.txt
done
wait
for f in kernels/matmul_forward_gelu/16_pingpong_pairs_multicast.cu kernels/matmul_backward_dgelu/11_pingpong_pairs_multicast.cu; do
  nvcc -arch=sm_90a -cubin -o /tmp/$(basename $f .cu).cubin -Ikernels/common -I$(dirname $f) $f
done
timeout 60 python3 $S_DIR/cluster_probe.py /tmp/16_pingpong_pairs_multicast.cubin matmul_forward_gelu16 198656 > $o/clusters.txt 2>&1
timeout 60 python3 $S_DIR/cluster_probe.py /tmp/11_pingpong_pairs_multicast.cubin matmul_backward_dgelu11 202752 >> $o/clusters.txt 2>&1
for i in 1 2; do
  for v in 5 14 16 17; do t timeout 90 $W run matmul_forward_gelu $v --sizes B=32,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0 --json $o/run-fg-$v-b32-$i.json > $o/run-fg-$v-b32-$i.txt 2>&1; done
  for v in 6 10 11; do t timeout 90 $W run matmul_backward_dgelu $v --sizes B=32,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0 --json $o/run-dg-$v-b32-$i.json > $o/run-dg-$v-b32-$i.txt 2>&1; done
done
for v in 14 16 17; do t timeout 90 $W run matmul_forward_gelu $v --sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0 --json $o/run-fg-$v-b16-1.json > $o/run-fg-$v-b16-1.txt 2>&1; done
for v in 10 11; do t timeout 90 $W run matmul_backward_dgelu $v --sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0 --json $o/run-dg-$v-b16-1.json > $o/run-dg-$v-b16-1.txt 2>&1; done
python3 - $o > $o/verdict.txt 2>&1 <<'PY'
import json, sys, glob, os
o = sys.argv[1]
for f in sorted(glob.glob(o + "/run-*.json")):
    v = json.load(open(f))["families"][0]["versions"][0]
    tm = list(v["timings"].values())[0] if v.get("timings") else {}
    print(os.path.basename(f)[4:-5], v["status"], tm.get("median_us"), tm.get("p20_us"), tm.get("p80_us"))
PY
cat $o/verdict.txt $o/clusters.txt $o/status.txt
if ! grep -q "rc=[^0]" $o/status.txt; then
  t timeout 120 $W promote matmul_forward_gelu 16 > $o/promote.txt 2>&1
  t timeout 120 $W promote matmul_backward_dgelu 11 >> $o/promote.txt 2>&1
  tar czf $o/train-kernels.tgz train/kernels/matmul_forward_gelu* train/kernels/matmul_backward_dgelu* train/kernels/manifest.json
  tr() { local name=$1; shift; echo "=== $name: $*" >> $o/train-log.txt; t timeout 150 "$@" --json $o/train/$name.json >> $o/train-log.txt 2>&1; }
  S="--precision bf16 --steps 50 -v 0 -s 0"
  tr warm $W train $S -b 32
  tr P_b32_1 $W train $S -b 32
  tr torch_b32 python3 -m train.torch_baseline --precision bf16 -b 32 --steps 50
  tr P_b32_2 $W train $S -b 32
  tr P_b16_1 $W train $S -b 16
  python3 - $o/train > $o/train-summary.txt 2>&1 <<'PY'
import json, sys, glob, os
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    j = json.load(open(f)); print(os.path.basename(f)[:-5], j.get("median_ms"), j.get("median_tokens_per_s") or j.get("tokens_per_s"), j.get("median_mfu"))
PY
  cat $o/train-summary.txt; tail -n 3 $o/promote.txt
fi
grep -a -h "check \|clean" $o/check-*.txt $o/sanitize-*.txt | cut -c1-150
cat $o/times.txt
cd $OUT && tar czf c1.tgz c1 && rm -rf c1
