#!/usr/bin/env bash
# Multi-GPU speed, ours against PyTorch DDP on the same machine in one go (issue [11] item 6):
# bf16, B=16 per GPU, T=1024, on 1, 2 and 4 GPUs (as many as the machine has), then
# --total-batch 524288 with --zero 1 on all of them. Logs and JSON into OUT; a table at the end.
#
#   bash train/scaling.sh OUT [STEPS]
#
# The data: `workbench prepro text` of tiny Shakespeare four times over (about 1.2M training
# tokens: more than one global batch of 524,288 + 1), written under OUT/data.
set -uo pipefail
out=${1:?usage: train/scaling.sh OUT [STEPS]}
steps=${2:-40}
mkdir -p "$out/data"
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
text=${TINYSHAKESPEARE:-.gpu/data/tinyshakespeare/input.txt}
gpus=$(python3 -c "import pycuda.driver as d; d.init(); print(d.Device.count())")
python3 -m workbench prepro text "$text" "$text" "$text" "$text" --out "$out/data" --name ts \
    --shard-size 2000000 --val-tokens 100000 --force >"$out/prepro.log" 2>&1 || { cat "$out/prepro.log"; exit 1; }
data=(-i "$out/data/ts_train_*.bin" -j "$out/data/ts_val_*.bin")
mpi=(mpirun --bind-to none -np)
run() {  # name, then the command
    local name=$1; shift
    echo "== $name: $*"
    timeout 900 "$@" >"$out/$name.log" 2>&1
    echo "   exit $? ($(tail -n 1 "$out/$name.log" | cut -c1-160))"
}
for n in 1 2 4; do
    [ "$n" -le "$gpus" ] || continue
    launch=(); [ "$n" -gt 1 ] && launch=("${mpi[@]}" "$n")
    run "ours-$n" "${launch[@]}" python3 -m workbench train "${data[@]}" --precision bf16 -b 16 --steps "$steps" \
        -v 0 -s 0 --json "$out/ours-$n.json"
    run "torch-$n" "${launch[@]}" python3 -m train.torch_baseline "${data[@]::2}" --precision bf16 -b 16 \
        --steps "$steps" --json "$out/torch-$n.json"
done
n=$(( gpus >= 4 ? 4 : gpus ))
launch=(); [ "$n" -gt 1 ] && launch=("${mpi[@]}" "$n")
run "ours-$n-total-524288-zero1" "${launch[@]}" python3 -m workbench train "${data[@]}" --precision bf16 -b 16 \
    --total-batch 524288 --zero 1 --steps 16 -v 0 -s 0 --json "$out/ours-$n-total-524288-zero1.json"
python3 - "$out" <<'EOF'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
def get(name, key):
    p = out / f"{name}.json"
    return json.loads(p.read_text()).get(key) if p.exists() else None
print(f"{'GPUs':>4} {'ours tok/s':>12} {'ms/step':>8} {'DDP tok/s':>12} {'ms/step':>8} {'ours/DDP':>8} {'ours vs 1 GPU':>13}")
one = get("ours-1", "median_tokens_per_s")
for n in (1, 2, 4):
    ours, torch = get(f"ours-{n}", "median_tokens_per_s"), get(f"torch-{n}", "tokens_per_s")
    if ours is None and torch is None:
        continue
    fmt = lambda x, f: format(x, f) if x is not None else "-"
    print(f"{n:>4} {fmt(ours, ',.0f'):>12} {fmt(get(f'ours-{n}', 'median_ms'), '.2f'):>8} {fmt(torch, ',.0f'):>12} "
          f"{fmt(get(f'torch-{n}', 'median_ms'), '.2f'):>8} {fmt(ours / torch if ours and torch else None, '.3f'):>8} "
          f"{fmt(ours / one if ours and one else None, '.2f'):>13}")
for p in sorted(out.glob("ours-*-total-524288-zero1.json")):
    s = json.loads(p.read_text())
    n = s["world"]
    base = get(f"ours-{n}", "median_tokens_per_s")
    print(f"{p.stem}: {s['median_tokens_per_s']:,.0f} tok/s, {s['median_ms']:.1f} ms/step, {s['micro_steps']} micro-steps"
          + (f", {s['median_tokens_per_s'] / base:.3f}x the run without accumulation" if base else ""))
EOF
