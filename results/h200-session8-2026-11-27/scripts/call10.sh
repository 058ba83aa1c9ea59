source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
mkdir -p $OUT/t
cp scratch/s8/bwd13_swap.cu kernels/attention_backward/15_v.cu
cp scratch/s8/bwd13_v4swap.cu kernels/attention_backward/16_v.cu
S=$(date +%s)
for f in 15 16; do SRC=kernels/attention_backward/${f}_v.cu KN=attention_backward13 SHARED=134144 SWAP=1 timeout 60 python3 scratch/s8/bwd_debug.py 2 1024 3 64 2>&1 | grep -E "bad"; done | tee $OUT/t/dbg.txt
for f in 13_flash_wgmma_128q 15_v 16_v 13_flash_wgmma_128q 15_v 16_v; do SW=1; [ $f = 13_flash_wgmma_128q ] && SW=; SRC=kernels/attention_backward/$f.cu KN=attention_backward13 SHARED=134144 SWAP=$SW BENCH=1 timeout 60 python3 scratch/s8/bwd_debug.py 16 1024 12 64 2>&1 | grep median; done | tee $OUT/t/bench.txt
for v in 15 16; do timeout 150 python3 -m workbench run attention_backward $v --no-torch > $OUT/t/check$v.txt 2>&1; echo "check $v rc=$?"; grep -hE "check |best" $OUT/t/check$v.txt | tail -2; done
for v in 9 13 15 16 9 13 15 16; do timeout 120 python3 -m workbench run attention_backward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s).txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; grep -hE "best|FAIL|rror" $OUT/t/run$v-*.txt | tail -1; done
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
