source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
mkdir -p $OUT/t; for f in vR_relaxed vT_relaxed_fence vU_lane0 vA_nopoll; do cp scratch/s9/$f.cu kernels/attention_backward/29_$f.cu; done
S=$(date +%s); X=scratch/s9/bwd_check.py; D=kernels/attention_backward
for f in vR_relaxed vT_relaxed_fence vU_lane0; do timeout 60 python3 $X check $D/29_$f.cu attention_backward14 2 1024 3 2>&1 | tail -1; done
for r in 1 2; do for f in 14_flash_wgmma_ordered_dq 29_vA_nopoll 29_vR_relaxed 29_vT_relaxed_fence 29_vU_lane0; do timeout 60 python3 $X bench $D/$f.cu attention_backward14 16 1024 12 2>&1 | tail -1; done; done | tee $OUT/t/bench.txt
(which cuobjdump nvdisasm; nvcc -cubin -arch=sm_90a -O3 -Ikernels/common -I$D $D/14_flash_wgmma_ordered_dq.cu -o /tmp/b.cubin && cuobjdump -sass /tmp/b.cubin > $OUT/t/sass14.txt; grep -nE "CCTL|MEMBAR|STRONG|RED|FENCE|ERRBAR|LDGSTS|WARPGROUP" $OUT/t/sass14.txt | head -60) 2>&1 | tail -62
echo "$(( $(date +%s) - S ))s"
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
