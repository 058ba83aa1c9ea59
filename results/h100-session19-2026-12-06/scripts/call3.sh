#!/usr/bin/env bash
# session 19, call 3 (H100): why is attention_forward 16 (TMA) slower than 15 at real clocks
# (call 2: 97.0-97.6 us against 93.3-93.9) when Nsight Compute at base clocks has it faster
# (105.2 against 110.3, cuDNN 105.0)? Diagnostics, device-only copies (results/.../variants):
# 17 = 16 without the per-block tensor-map acquire; 18 = 16 with Q and tile 0 copied by the
# warpgroup's cp.async (the TMA only from tile 1); then 16 with the maps' L2 promotion at 128 B
# and none instead of 256 B (tensor_maps.py patched on the device only). Two interleaved rounds.
# Then every attention_forward version's GPU test (the family has a new test size).
# Ran on an H200 (no H100 could be started): compare within this call only.
set -u
o=$OUT/c3; mkdir -p $o; R=results/h100-session19-2026-12-06
export WORKBENCH_COMMIT=$(cat $R/scripts/commit)+diag COLUMNS=170
t() { local s=$(date +%s%N); "$@"; local rc=$?; echo "$(( ($(date +%s%N) - s)/1000000 )) ms rc=$rc : $*" >> $o/times.txt; return $rc; }
W="python3 -m workbench"
cp $R/variants/17_no_acquire.cu $R/variants/18_cp_async_start.cu kernels/attention_forward/
python3 -m compileall -q -j 16 workbench references train > /dev/null 2>&1
for v in 17 18; do t timeout 100 $W run attention_forward $v --seeds 1 --no-torch --json $o/check-$v.json > $o/check-$v.txt 2>&1; done
T="--sizes B=16,T=1024 --no-test-sizes --seeds 1 --no-torch --budget 1.0"
for i in 1 2; do for v in 9 15 16 17 18; do
  t timeout 90 $W run attention_forward $v $T --json $o/run-$v-$i.json > $o/run-$v-$i.txt 2>&1
done; done
for p in 2 0; do
  sed -i "s/^L2_PROMOTION_256B = [0-9]/L2_PROMOTION_256B = $p/" workbench/tensor_maps.py
  for i in 1 2; do t timeout 90 $W run attention_forward 16 $T --json $o/run-16-l2p$p-$i.json > $o/run-16-l2p$p-$i.txt 2>&1; done
done
sed -i "s/^L2_PROMOTION_256B = [0-9]/L2_PROMOTION_256B = 3/" workbench/tensor_maps.py
rm -f kernels/attention_forward/17_no_acquire.cu kernels/attention_forward/18_cp_async_start.cu
t timeout 200 python3 -m pytest -m gpu -q -rs -p no:cacheprovider --timeout 180 tests/test_gpu.py -k attention_forward > $o/gpu_attention_forward.txt 2>&1
tail -n 3 $o/gpu_attention_forward.txt
for f in $o/check-*.txt; do echo "$(basename $f): $(grep -a -h 'check ' $f | cut -c1-120)"; done
for f in $o/run-*.txt; do echo "$(basename $f): $(grep -a -h 'best:' $f | cut -c1-60)"; done
cat $o/times.txt
