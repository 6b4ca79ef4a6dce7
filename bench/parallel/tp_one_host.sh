#!/usr/bin/env bash
# Tensor parallelism on one host: gpt-small trained by
#   - one process with 2 compute threads,
#   - dp=2: 2 ranks of 1 thread, data parallel,
#   - tp=2: 2 ranks of 1 thread, the model split (Megatron),
#   - tp=2 with sequence parallelism,
# alternating, ROUNDS rounds (the better of each kept: this machine is
# shared).  Reports tokens/s (after 3 warm-up steps), the peak resident
# memory per rank, the activation peak per micro-batch and the model
# states per rank (values, gradients, AdamW's two moments: 16 bytes per
# parameter) against the formula split/t + replicated.
#
#   bench/parallel/tp_one_host.sh [STEPS=12] [ROUNDS=2]
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${1:-12}
ROUNDS=${2:-2}
BIN=build/bin
[ -x $BIN/dtrain ] || { echo "build first: make build" >&2; exit 2; }
WORK=$(mktemp -d /tmp/dtrain-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
CFG=(--config configs/gpt-small.json --set steps="$STEPS" --set log_interval=1 --set eval_interval=0
     --set eval_batches=1)

run() { # name ranks threads tp [sequence_parallel]
    local out="$WORK/$1.$r"
    "$BIN/dtrun" -n "$2" /usr/bin/time -f "maxrss_kb %M" "$BIN/dtrain" train "${CFG[@]}" --set threads="$3" \
        --set tp="$4" --set sequence_parallel="${5:-false}" --set metrics_file="$out.jsonl" >"$out" 2>&1 ||
        { cat "$out"; exit 1; }
}
for ((r = 0; r < ROUNDS; r++)); do
    run one 1 2 1
    run dp2 2 1 1
    run tp2 2 1 2
    run tp2sp 2 1 2 true
done
python3 - "$WORK" "$ROUNDS" <<'PY'
import glob, json, re, sys
work, rounds = sys.argv[1], int(sys.argv[2])
def rate(path):
    rows = [json.loads(l) for l in open(path) if '"loss"' in l][3:]
    return len(rows) / sum(1.0 / r["tokens_per_s"] for r in rows)
res = {}
for name in ("one", "dp2", "tp2", "tp2sp"):
    best = max(range(rounds), key=lambda k: rate(f"{work}/{name}.{k}.jsonl"))
    text = open(f"{work}/{name}.{best}").read()
    rss = [int(x) for x in re.findall(r"maxrss_kb (\d+)", text)]
    whole = int(re.search(r"training gpt \((\d+) parameters\)", text).group(1))
    m = re.search(r"\((\d+) parameters on each rank\)", text)
    mine = int(m.group(1)) if m else whole
    act = float(re.search(r"activation memory: at most ([0-9.]+) MiB", text).group(1))
    res[name] = dict(rate=rate(f"{work}/{name}.{best}.jsonl"), rss=max(rss) / 1024, whole=whole, mine=mine, act=act)
# the formula: split tensors (wte, c_attn, c_proj, c_fc and their column biases) over t, the rest whole
L, D, V, T = 6, 384, 256, 128
split = V * D + L * (3 * D * D + 3 * D + D * D + 4 * D * D + 4 * D + 4 * D * D)
rep = T * D + L * (D + D + 4 * D) + 2 * D
assert split + rep == res["one"]["whole"], (split + rep, res["one"]["whole"])
print("| run | ranks x threads | tokens/s | vs one process | peak RSS per rank | activations per micro-batch | model states per rank (16 B/param) | formula |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
base = res["one"]["rate"]
for name, shape, t in (("one", "1 x 2", 1), ("dp2", "2 x 1", 1), ("tp2", "2 x 1", 2), ("tp2sp", "2 x 1", 2)):
    x = res[name]
    formula = (split / t + rep) * 16 / 2**20
    print(f"| {name} | {shape} | {x['rate']:.0f} | {x['rate'] / base:.2f} | {x['rss']:.0f} MiB | {x['act']:.1f} MiB "
          f"| {x['mine'] * 16 / 2**20:.1f} MiB | {formula:.1f} MiB |")
PY
