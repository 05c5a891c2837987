#!/usr/bin/env bash
# Lab equipment (not shipped): the corrected tune on a GPU, twice (the issue on the GPU re-measure), from the repo
# root of the GPU machine, in one or two device calls:
#   STEP=1 bash scripts/gpu/run-tune-2.sh   # build llama.cpp here (CUDA, sm_90, ~5 min) beside the synthetic
#                                            # models, then tune run 1
#   STEP=2 bash scripts/gpu/run-tune-2.sh   # tune run 2 on the same warm machine (/tmp/g kept)
# Each run: `specops tune` on the 14B shape with the real pair's imposed acceptance, draft lengths 8,12,16 all
# measured (--measure-all), 128-token requests, 3 tasks per workload (12 per arm), and --parallel 4: after the
# one-stream choice, the same choice against plain decoding at 4 streams.
# Needs in .gpu/ (git-ignored, carried; scripts/gpu/pack-tune-2 fills it on the CPU host): llama-src.tar.xz,
# gguf-py/, ggml-vocab-qwen2.gguf, rates.txt (pylib/ where the machine's python lacks httpx).
# Rehearsal on a CPU host: P=<a CPU llama.cpp prefix> TARGET_SHAPE=0.5b MAX_TOKENS=16 BUDGET=1.5 STEP=1 bash ...
set -u
G=${G:-/tmp/g}
OUT=${OUT:-$G/out}
REPO=$(pwd)
mkdir -p "$OUT" "$G/models" "$G/w"
stamp() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$OUT/run.log"; }
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
PYTHONPATH="$REPO/src:$REPO/.gpu/gguf-py"
python3 -c "import httpx, psutil, prometheus_client" 2>/dev/null || PYTHONPATH="$PYTHONPATH:$REPO/.gpu/pylib"
export PYTHONPATH
specops() { python3 -c "import sys; from specops.cli import main; sys.exit(main())" "$@"; }
STEP=${STEP:-1}
TARGET_SHAPE=${TARGET_SHAPE:-14b}
BUDGET=${BUDGET:-3}        # minutes of `specops tune --budget` per run (it ends sooner once its tasks are measured)
LENGTHS=${LENGTHS:-8,12,16}
MAX_TOKENS=${MAX_TOKENS:-128}
PARALLEL=${PARALLEL:-4}
P=${P:-$G/llama-cuda}
M=$G/models

if [ "$STEP" = 1 ]; then
  stamp "host: $(nproc) cpus, $(free -g | awk '/Mem/ {print $2}') GiB, $(python3 -V 2>&1), commit $(git rev-parse --short HEAD 2>/dev/null)"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv 2>&1 | tee "$OUT/gpu.csv"
  (  # the synthetic models beside the build
    py=(python3 "$REPO/scripts/gpu/synth_gguf.py" --vocab .gpu/ggml-vocab-qwen2.gguf)
    "${py[@]}" --shape qwen2.5-0.5b "$M/draft.gguf" && "${py[@]}" --shape "qwen2.5-$TARGET_SHAPE" "$M/target.gguf" \
      && touch "$M/done"
  ) > "$OUT/synth.log" 2>&1 &
  if [ ! -x "$P/bin/llama-server" ]; then
    cuda_home=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
    extra=()
    if ! ls "$cuda_home"/lib64/libcublas.so "$cuda_home"/targets/*/lib/libcublas.so >/dev/null 2>&1; then
      lib=$(find / -xdev -name 'libcublas.so.*' 2>/dev/null | head -1)
      inc=$(find / -xdev -name 'cublas_v2.h' 2>/dev/null | head -1)
      stamp "cuBLAS from $lib, headers $inc"
      mkdir -p "$G/cuda-libs"
      for f in "$(dirname "$lib")"/lib*.so.*; do
        ln -sf "$f" "$G/cuda-libs/$(basename "$f")"; ln -sf "$f" "$G/cuda-libs/$(basename "${f%%.so.*}").so"
      done
      extra+=(--cuda-library-dir "$G/cuda-libs")
      [ -n "$inc" ] && extra+=(--cuda-include-dir "$(dirname "$inc")")
    fi
    tar xJf .gpu/llama-src.tar.xz -C "$G"
    stamp "build start (nvcc $(nvcc --version | tail -1))"
    specops build --source "$G/llama.cpp-0c1e57098" --backend cuda --cuda-architectures 90 \
      --commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f --cuda-home "$cuda_home" --prefix "$P" \
      --build-dir "$G/build" --no-ccache "${extra[@]}" > "$OUT/build.log" 2>&1
    tail -3 "$OUT/build.log"
    [ -x "$P/bin/llama-server" ] || { stamp "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
    stamp "build done"
  fi
  "$P/bin/llama-server" --version > "$OUT/version.txt" 2>&1 || { stamp "llama-server does not start"; cat "$OUT/version.txt"; exit 1; }
  cp "$P/build-info.json" "$OUT/" 2>/dev/null
  [ -e "$P/capabilities.json" ] || specops capabilities --binary "$P/bin/llama-server" -o "$P/capabilities.json" \
    || { stamp "capabilities failed"; exit 1; }
  "$P/bin/llama-server" --list-devices 2>&1 | tee "$OUT/list-devices.txt" | tail -2
  while [ ! -e "$M/done" ]; do sleep 1; kill -0 %1 2>/dev/null || [ -e "$M/done" ] || { stamp "SYNTH FAILED"; cat "$OUT/synth.log"; exit 1; }; done
  cat "$OUT/synth.log"
fi

run=run$STEP
stamp "tune $run: qwen2.5-$TARGET_SHAPE, lengths $LENGTHS, $MAX_TOKENS tokens, parallel $PARALLEL, budget $BUDGET min"
nvidia-smi --query-gpu=memory.used --format=csv,noheader > "$OUT/vram-before-$run.txt" 2>/dev/null
specops tune --target "$M/target.gguf" --draft "$M/draft.gguf" --llama-prefix "$P" --synth-rates "$(cat .gpu/rates.txt)" \
  --rule fastest --ngram "" --no-default --lengths "$LENGTHS" --measure-all --budget "$BUDGET" \
  --limit-per-workload 3 --max-tokens "$MAX_TOKENS" --parallel "$PARALLEL" --work-dir "$G/w/tune-$run" \
  --out "$OUT/tune-$run.json" > "$OUT/tune-$run.log" 2>&1
stamp "tune $run: exit $?"
tail -40 "$OUT/tune-$run.log"
# the work dir (ceiling, probes, every block, the servers' argv; the servers' logs cut to their tails) in one file
find "$G/w/tune-$run" -name '*.log' -size +200k -exec sh -c 'tail -c 200000 "$1" > "$1.tail" && mv "$1.tail" "$1"' _ {} \;
tar czf "$OUT/work-$run.tgz" -C "$G/w" "tune-$run"
ls -la "$OUT"
stamp "DONE $run"
