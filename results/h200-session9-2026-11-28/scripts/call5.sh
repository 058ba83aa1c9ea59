source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
mkdir -p $OUT/t; for f in vK_poll_early_fetch_late vK2_early_release vK3_relaxed_early vA_nopoll; do cp scratch/s9/$f.cu kernels/attention_backward/29_$f.cu; done
S=$(date +%s); X=scratch/s9/bwd_check.py; D=kernels/attention_backward
for f in vK_poll_early_fetch_late vK2_early_release vK3_relaxed_early; do timeout 60 python3 $X check $D/29_$f.cu attention_backward14 2 1024 3 2>&1 | tail -1; done
for r in 1 2; do for f in 14_flash_wgmma_ordered_dq 29_vA_nopoll 29_vK_poll_early_fetch_late 29_vK2_early_release 29_vK3_relaxed_early; do timeout 60 python3 $X bench $D/$f.cu attention_backward14 16 1024 12 2>&1 | tail -1; done; done | tee $OUT/t/bench.txt
(nvcc -cubin -arch=sm_90a -O3 -Ikernels/common -I$D $D/29_vK_poll_early_fetch_late.cu -o /tmp/b.cubin && cuobjdump -sass /tmp/b.cubin > $OUT/t/sassK.txt; grep -nE "CCTL|STRONG.GPU R|MEMBAR" $OUT/t/sassK.txt | head; n=$(grep -n "LDG.E.STRONG.GPU" $OUT/t/sassK.txt | head -1 | cut -d: -f1); sed -n "$((n-4)),$((n+30))p" $OUT/t/sassK.txt | cut -c1-90)
echo "$(( $(date +%s) - S ))s"
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
