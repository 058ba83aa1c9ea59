source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
mkdir -p $OUT/t; for f in vK5_read_at_top vK6_early_release; do cp scratch/s9/$f.cu kernels/attention_backward/29_$f.cu; done
S=$(date +%s); X=scratch/s9/bwd_check.py; D=kernels/attention_backward; V14=$D/14_flash_wgmma_ordered_dq.cu
for sz in "2 1024 3" "1 200 2" "1 37 1" "1 300 2" "1 2048 2" "3 129 2" "1 1 1" "2 128 1" "1 4096 1"; do timeout 60 python3 $X check $V14 attention_backward14 $sz 2>&1 | tail -1 ; done | tee $OUT/t/check14.txt
for sz in "4 1024 12" "1 2048 4" "3 300 5"; do REPS=6 timeout 60 python3 $X det $V14 attention_backward14 $sz 2>&1 | tail -1; done | tee $OUT/t/det.txt
for f in vK5_read_at_top vK6_early_release; do timeout 60 python3 $X check $D/29_$f.cu attention_backward14 2 1024 3 2>&1 | tail -1; done
for r in 1 2; do for f in 14_flash_wgmma_ordered_dq 29_vK5_read_at_top 29_vK6_early_release; do timeout 60 python3 $X bench $D/$f.cu attention_backward14 16 1024 12 2>&1 | tail -1; done; done | tee $OUT/t/bench.txt
rm $D/29_*
timeout 200 python3 -m workbench run attention_backward 14 --no-torch > $OUT/t/wb14.txt 2>&1; echo "wb14 rc=$?"; grep -E "check " $OUT/t/wb14.txt | head -3
for v in 9 13 14 9 13 14; do timeout 120 python3 -m workbench run attention_backward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s%N).txt 2>&1; echo "v$v $(grep -h '^best' $OUT/t/run$v-*.txt | tail -1)"; done
timeout 240 python3 -m workbench sanitize attention_backward 14 --tool memcheck --tool racecheck --tool synccheck > $OUT/t/san14.txt 2>&1; echo "san rc=$?"; tail -2 $OUT/t/san14.txt
echo "$(( $(date +%s) - S ))s"
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
