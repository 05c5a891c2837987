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
#   llama-src.tar.xz     the pinned source (docs, models, tests stripped): built here only if the carried build fails
# What it measures lands in $OUT as it goes: tune-<target>.json, and every work dir in results.tgz after each target
# (the device tool brings $OUT back, also after a timeout, but only a few files of it).
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
TARGETS=${TARGETS:-14b 32b}  # qwen2.5-<t> shapes of scripts/gpu/synth_gguf.py, tuned in this order
DRAFT=${DRAFT:-0.5b}
BUDGET_14B=${BUDGET_14B:-3.5}  # minutes of `specops tune --budget` per target (BUDGET_<T>, dots as _)
BUDGET_32B=${BUDGET_32B:-4.5}
LENGTHS=${LENGTHS:-2,4,8,12,16}
MAX_TOKENS=${MAX_TOKENS:-64}  # tokens per measured request (gpu-h100.md's 1.39x for the 14B at n16 was at 128)

stamp "host: $(nproc) cpus, $(free -g | awk '/Mem/ {print $2}') GiB, python $(python3 -V 2>&1)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.csv"

# the synthetic models, in the background: the draft and the first target, the others beside them
(
  py=(python3 "$REPO/scripts/gpu/synth_gguf.py" --vocab .gpu/ggml-vocab-qwen2.gguf)
  for t in ${TARGETS#* }; do
    [ "$t" = "${TARGETS%% *}" ] || ( "${py[@]}" --shape "qwen2.5-$t" "$G/models/$t.gguf" && touch "$G/models/$t.done" ) &
  done
  first=${TARGETS%% *}
  "${py[@]}" --shape "qwen2.5-$DRAFT" "$G/models/draft.gguf" && "${py[@]}" --shape "qwen2.5-$first" \
    "$G/models/$first.gguf" && touch "$G/models/$first.done"
  wait
) > "$OUT/synth.log" 2>&1 &

# the carried build links cuBLAS and the CUDA runtime by soname: this machine's toolkit (or a wheel's) provides them
if command -v nvcc >/dev/null; then
  cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  LD_LIBRARY_PATH="$cuda_home/lib64:$cuda_home/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}"
  if ! ls "$cuda_home"/lib64/libcublas.so.13 "$cuda_home"/targets/*/lib/libcublas.so.13 >/dev/null 2>&1; then
    lib=$(find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -1)
    [ -n "$lib" ] && LD_LIBRARY_PATH="$(dirname "$lib"):$LD_LIBRARY_PATH"
  fi
  export LD_LIBRARY_PATH
fi
P=$G/llama-cuda
mkdir -p "$P"
tar xJf .gpu/llama-cuda.tar.xz -C "$P"
if ! "$P/bin/llama-server" --version > "$OUT/version.txt" 2>&1; then
  # the build made on the CPU host does not run here: build on this machine (~5 min of the budget)
  stamp "the carried llama-server does not start:"; cat "$OUT/version.txt"; ldd "$P/bin/llama-server" > "$OUT/ldd.txt"
  tar xJf .gpu/llama-src.tar.xz -C "$G"
  rm -rf "$P"
  specops build --source "$G/llama.cpp-0c1e57098" --backend cuda --cuda-architectures 90 \
    --commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f --cuda-home "$cuda_home" --prefix "$P" \
    --build-dir "$G/build" --no-ccache 2>&1 | tail -5 | tee "$OUT/build.log"
  "$P/bin/llama-server" --version > "$OUT/version.txt" 2>&1 || { stamp "BUILD FAILED"; exit 1; }
  BUDGET_14B=2.5 BUDGET_32B=3
fi
cp "$P/build-info.json" "$OUT/" 2>/dev/null
cat "$OUT/version.txt"
specops capabilities --binary "$P/bin/llama-server" -o "$P/capabilities.json" || { stamp "capabilities failed"; exit 1; }
"$P/bin/llama-server" --list-devices 2>&1 | tee "$OUT/list-devices.txt" | tail -3
RATES=$(cat .gpu/rates.txt)

wait_for() { while [ ! -e "$1" ]; do sleep 1; done; }  # the synth log says why, should one never come
tune() {  # tune NAME TARGET BUDGET; the work dir goes into $OUT/results.tgz after each target: the device tool
  # brings back only a few files per call and empties $OUT before the next (a run's work dirs were lost that way)
  local name=$1 target=$2 budget=$3
  stamp "tune $name (budget $budget min)"
  mkdir -p "$G/w"
  nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$G/w/vram-before-$name.txt" 2>/dev/null
  specops tune --target "$target" --draft "$G/models/draft.gguf" --llama-prefix "$P" --synth-rates "$RATES" \
    --rule fastest --ngram "" --no-default --lengths "$LENGTHS" --measure-all --budget "$budget" \
    --limit-per-workload 3 --max-tokens "$MAX_TOKENS" --work-dir "$G/w/tune-$name" --out "$OUT/tune-$name.json" \
    $TUNE_EXTRA > "$G/w/tune-$name.log" 2>&1
  stamp "tune $name: exit $?"
  tail -22 "$G/w/tune-$name.log"
  tar czf "$OUT/results.tgz" -C "$G" w
}

gpu_mib=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits 2>/dev/null | head -1)
for t in $TARGETS; do
  wait_for "$G/models/$t.done"
  budget_var=BUDGET_${t^^}; budget_var=${budget_var//./_}
  extra=""
  if [ "$t" = 32b ] && [ "${gpu_mib:-0}" -lt 100000 ]; then
    # the paired design loads baseline, its A/A twin, the exact baseline and an arm: four 20 GiB servers do not
    # fit an 80 GB card, so the 32B gets the tune's predictions only there
    stamp "32b on a ${gpu_mib} MiB GPU: predictions only"; extra="--predict-only"
  fi
  TUNE_EXTRA="${TUNE_EXTRA:-} $extra" tune "qwen2.5-$t" "$G/models/$t.gguf" "${!budget_var:-4}"
done
cat "$OUT/synth.log"
stamp "ALL DONE"
