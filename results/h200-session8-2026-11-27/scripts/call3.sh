source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/gpu.txt
for x in e1:14 e2:15 e3:16 e4:17 e5:18; do cp scratch/s8/${x%%:*}.cu kernels/attention_forward/${x##*:}_v.cu; done
mkdir -p $OUT/t
S=$(date +%s)
for v in 15 16 17 18; do timeout 150 python3 -m workbench run attention_forward $v --no-torch > $OUT/t/check$v.txt 2>&1; echo "check v$v rc=$? $(( $(date +%s) - S ))s"; grep -hE "check |best|FAIL|rror|C75" $OUT/t/check$v.txt | tail -3; done
for v in 9 14 15 16 17 18 12 14 15 16 17 18 9; do timeout 120 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/t/run$v-$(date +%s).txt 2>&1; echo "v$v $(( $(date +%s) - S ))s"; grep -hE "best|FAIL|rror" $OUT/t/run$v-*.txt | tail -2; done
tar czf $OUT/t.tgz -C $OUT t && rm -rf $OUT/t
