source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
cp scratch/s8/15.cu kernels/attention_forward/15_v.cu
mkdir -p $OUT/t
S=$(date +%s)
timeout 150 python3 -m workbench run attention_forward 15 --no-torch > $OUT/t/check15.txt 2>&1; echo "check v15 rc=$? $(( $(date +%s) - S ))s"; grep -hE "check |best|FAIL|rror|C75" $OUT/t/check15.txt | tail -3
for sz in B=2,T=200,NH=3,HS=64 B=1,T=960,NH=2,HS=64 B=1,T=64,NH=2,HS=64 B=1,T=192,NH=1,HS=64 B=2,T=1000,NH=2,HS=64 B=1,T=2048,NH=2,HS=64; do timeout 60 python3 -m workbench run attention_forward 15 --no-torch --no-test-sizes --sizes $sz > $OUT/t/c15-$sz.txt 2>&1; echo "$sz rc=$?"; grep -hE "check " $OUT/t/c15-$sz.txt | head -1; done
for v in 9 14 15 14 15 9; do timeout 120 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s).txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; grep -hE "best|FAIL|rror" $OUT/t/run$v-*.txt | tail -2; done
for v in 14 15; do timeout 200 python3 -m workbench sanitize attention_forward $v --tool memcheck --tool racecheck --tool synccheck > $OUT/t/sanitize$v.txt 2>&1; echo "v$v rc=$?"; done; echo "sanitize rc=$? $(( $(date +%s) - S ))s"; grep -hE "clean|error|hazard|verdict|runs" $OUT/t/sanitize*.txt | tail -8
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
