#!/usr/bin/env bash
# Lab equipment (not shipped): `specops tune` on the GPU machine for the 14B and 32B shapes (issue 44), one
# device call from the repo root:  bash scripts/gpu/run-tune.sh
# Needs in .gpu/ (carried, git-ignored; scripts/gpu/pack-tune makes it on the CPU host):
#   llama-cuda.tar.xz    the CUDA build (specops build --backend cuda --cuda-architectures 90, built on the CPU
#                        host against the same CUDA 13.0 toolkit), unpacked to $G/llama-cuda
#   gguf-py/             llama.cpp's gguf package from the pinned tree (synth_gguf.py and specops.fit read GGUFs)
#   ggml-vocab-qwen2.gguf the pinned tree's vocab-only file (the synthetic models' tokenizer)
#   rates.txt            the real pair's per-position acceptance (P0,...,P15; reports/gpu-h100/pair-acceptance-cpu.json)
#   pylib/               httpx and friends, used only where the machine's python lacks them
# Everything it measures lands in $OUT as it goes (the device tool brings $OUT back, also after a timeout).
set -u
G=${G:-/tmp/g}
OUT=${OUT:-$G/out}
REPO=$(pwd)
mkdir -p "$OUT" "$G/models"
stamp() { echo "[$(date +%H:%M:%S)] $*"; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
PYTHONPATH="$REPO/src:$REPO/.gpu/gguf-py"
python3 -c "import httpx, psutil, prometheus_client" 2>/dev/null || PYTHONPATH="$PYTHONPATH:$REPO/.gpu/pylib"
export PYTHONPATH
specops() { python3 -c "import sys; from specops.cli import main; sys.exit(main())" "$@"; }
BUDGET_14B=${BUDGET_14B:-3.5}
BUDGET_32B=${BUDGET_32B:-4.5}

stamp "host: $(nproc) cpus, $(free -g | awk '/Mem/ {print $2}') GiB, python $(python3 -V 2>&1)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.csv"

# the synthetic models, in the background: the draft and the 14B first, the 32B beside them
(
  py=(python3 "$REPO/scripts/gpu/synth_gguf.py" --vocab .gpu/ggml-vocab-qwen2.gguf)
  ( "${py[@]}" --shape qwen2.5-32b "$G/models/32b.gguf" && touch "$G/models/32b.done" ) &
  "${py[@]}" --shape qwen2.5-0.5b "$G/models/0.5b.gguf" && "${py[@]}" --shape qwen2.5-14b "$G/models/14b.gguf" \
    && touch "$G/models/14b.done"
  wait
) > "$OUT/synth.log" 2>&1 &

P=$G/llama-cuda
mkdir -p "$P"
tar xJf .gpu/llama-cuda.tar.xz -C "$P"
cp "$P/build-info.json" "$OUT/" 2>/dev/null
if ! "$P/bin/llama-server" --version > "$OUT/version.txt" 2>&1; then
  stamp "llama-server does not start:"; cat "$OUT/version.txt"; ldd "$P/bin/llama-server" | tee "$OUT/ldd.txt"
  exit 1
fi
cat "$OUT/version.txt"
specops capabilities --binary "$P/bin/llama-server" -o "$P/capabilities.json" || { stamp "capabilities failed"; exit 1; }
"$P/bin/llama-server" --list-devices 2>&1 | tee "$OUT/list-devices.txt" | tail -3
RATES=$(cat .gpu/rates.txt)

wait_for() { while [ ! -e "$1" ]; do sleep 1; done; }
tune() {  # tune NAME TARGET BUDGET
  local name=$1 target=$2 budget=$3
  stamp "tune $name (budget $budget min)"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$OUT/vram-before-$name.txt"
  specops tune --target "$target" --draft "$G/models/0.5b.gguf" --llama-prefix "$P" --synth-rates "$RATES" \
    --rule fastest --ngram "" --no-default --lengths 2,4,8,12,16 --measure-all --budget "$budget" \
    --limit-per-workload 3 --max-tokens 64 --work-dir "$OUT/tune-$name" --out "$OUT/tune-$name.json" \
    > "$OUT/tune-$name.log" 2>&1
  stamp "tune $name: exit $?"
  tail -22 "$OUT/tune-$name.log"
}

wait_for "$G/models/14b.done"
stamp "models: $(cat "$OUT/synth.log" | tr '\n' ' ')"
tune qwen2.5-14b "$G/models/14b.gguf" "$BUDGET_14B"
wait_for "$G/models/32b.done"
tune qwen2.5-32b "$G/models/32b.gguf" "$BUDGET_32B"
stamp "ALL DONE"
