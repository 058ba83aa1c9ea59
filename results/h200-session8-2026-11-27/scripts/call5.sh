source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
mkdir -p $OUT/t
S=$(date +%s)
for sz in "1 200 2 64" "1 64 1 64" "2 1024 3 64" "1 37 2 64"; do timeout 60 python3 scratch/s8/bwd_debug.py $sz; done 2>&1 | grep -v Resources | tee $OUT/t/dbg.txt
echo "dbg $(( $(date +%s) - S ))s"
timeout 150 python3 -m workbench run attention_backward 12 --no-torch > $OUT/t/check12.txt 2>&1; echo "check rc=$? $(( $(date +%s) - S ))s"; grep -hE "check |best|FAIL|rror|C75" $OUT/t/check12.txt | tail -4
for v in 9 10 11 12 9 12; do timeout 120 python3 -m workbench run attention_backward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s).txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; grep -hE "best|FAIL|rror" $OUT/t/run$v-*.txt | tail -1; done
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
