source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
F=kernels/attention_forward
for x in 13:2 14:3 15:4; do n=${x%:*}; k=${x#*:}; sed "s/#define POLY_EXP 0 /#define POLY_EXP $k /" $F/12_flash_wgmma_bf16.cu > $F/${n}_poly$k.cu; done
grep -n "define POLY_EXP" $F/1[345]_*.cu
for v in 9 12 13 14 15; do timeout 200 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/run$v-b16.txt 2>&1; echo "v$v"; grep -E "check |max abs|best" $OUT/run$v-b16.txt | head -4; done
timeout 250 python3 -m workbench profile attention_forward 9 12 14 --sizes B=16,T=1024,NH=12,HS=64 > $OUT/profile.txt 2>&1; cat $OUT/profile.txt | head -80
