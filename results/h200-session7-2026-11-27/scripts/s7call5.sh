source .gpu/activate.sh && python3 -m compileall -q -j 16 /tmp/gpu-site workbench references train >/dev/null 2>&1
F=kernels/attention_forward
sed 's/#define WGS 2 /#define WGS 1 /; s/^block = 256/block = 128/; s/grid = \["B \* NH", "cdiv(T, 128)"\]/grid = ["B * NH", "cdiv(T, 64)"]/; s/shared = "1024 + 128 \* 128 + 4/shared = "1024 + 64 * 128 + 4/' $F/12_flash_wgmma_bf16.cu > $F/13_wg1.cu
for v in 9 12 13 12 13; do timeout 200 python3 -m workbench run attention_forward $v --no-test-sizes --sizes B=16,T=1024,NH=12,HS=64 --no-torch > $OUT/run$v-b16.txt 2>&1; echo "v$v"; grep -E "max abs|best|regs" $OUT/run$v-b16.txt | head -4; done
timeout 300 python3 -m workbench run attention_forward 13 > $OUT/run13.txt 2>&1; grep -E "check|max abs|best|torch" $OUT/run13.txt
