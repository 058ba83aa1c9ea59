source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
mkdir -p $OUT/t; for f in vP_prof vG_top vA_nopoll; do cp scratch/s9/$f.cu kernels/attention_backward/29_$f.cu; done
S=$(date +%s); X=scratch/s9/bwd_check.py; D=kernels/attention_backward
timeout 60 python3 $X check $D/29_vG_top.cu attention_backward14 2 1024 3 2>&1 | tail -1
timeout 60 python3 $X check $D/29_vG_top.cu attention_backward14 1 300 2 2>&1 | tail -1
PROF=1 timeout 60 python3 $X bench $D/29_vP_prof.cu attention_backward14 16 1024 12 2>&1 | tail -20 | tee $OUT/t/prof.txt
for r in 1 2; do for f in 14_flash_wgmma_ordered_dq 29_vG_top 29_vA_nopoll; do timeout 60 python3 $X bench $D/$f.cu attention_backward14 16 1024 12 2>&1 | tail -1; done; done | tee $OUT/t/bench.txt
echo "$(( $(date +%s) - S ))s"
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
