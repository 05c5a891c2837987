#!/usr/bin/env bash
# Lab equipment (not shipped): the whole GPU run, started detached on the GPU machine from the repo root:
#   setsid nohup bash scripts/gpu/run.sh > /tmp/g/run.log 2>&1 &
# Needs in .gpu/ (carried, git-ignored): llama-src.tgz (the pinned source tree, docs/models/tests stripped),
# ggml-vocab-qwen2.gguf (llama.cpp's vocab-only file) and pair-acceptance.json (measured on the CPU host).
# Results land in /tmp/g/out as they are measured; scripts/gpu/collect packs them.
# shellcheck source=scripts/gpu/env.sh
. scripts/gpu/env.sh

stamp "host: $(nproc) cpus, $(free -g | awk '/Mem/ {print $2}') GiB"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv | tee "$OUT/gpu.csv"
nvcc --version | tail -2

# cuBLAS: the toolkit's, else the nvidia-cublas wheel's (unversioned links made in a dir of our own)
extra=()
if ! ls "$CUDA_HOME"/lib64/libcublas.so "$CUDA_HOME"/targets/*/lib/libcublas.so >/dev/null 2>&1; then
  lib=$(find / -xdev -name 'libcublas.so.*' -path '*nvidia*' 2>/dev/null | head -1)
  inc=$(find / -xdev -name 'cublas_v2.h' 2>/dev/null | head -1)
  stamp "cuBLAS from $lib, headers $inc"
  mkdir -p "$G/cuda-libs"
  for f in "$(dirname "$lib")"/lib*.so.*; do
    ln -sf "$f" "$G/cuda-libs/$(basename "$f")"
    ln -sf "$f" "$G/cuda-libs/$(basename "${f%%.so.*}").so"
  done
  extra+=(--cuda-library-dir "$G/cuda-libs")
  [ -n "$inc" ] && extra+=(--cuda-include-dir "$(dirname "$inc")")
  export LD_LIBRARY_PATH="$G/cuda-libs:${LD_LIBRARY_PATH:-}"
fi

# synthetic models in the background while the build compiles
(
  for s in 0.5b 1.5b 14b 7b; do
    py "$REPO/scripts/gpu/synth_gguf.py" --shape "qwen2.5-$s" --vocab .gpu/ggml-vocab-qwen2.gguf "$G/models/$s.gguf"
  done
  touch "$G/models/done"
) > "$OUT/synth.log" 2>&1 &

stamp "build start"
py -c "import sys; from specops.cli import main; sys.exit(main())" build --source "$SRC" --backend cuda \
  --cuda-architectures 90 --commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f --cuda-home "$CUDA_HOME" \
  --prefix "$G/llama-cuda" --build-dir "$G/build" --no-ccache "${extra[@]}" 2>&1 | tee "$OUT/build.log"
cp "$G/llama-cuda/build-info.json" "$OUT/" 2>/dev/null || { stamp "BUILD FAILED"; exit 1; }
stamp "build done"
while [ ! -e "$G/models/done" ]; do sleep 2; done
cat "$OUT/synth.log"; ls -la "$G/models"

M=$G/models
# the real pair's acceptance (measured on the CPU host): a later call may drop a newer one at $G/pair-acceptance.json
[ -e "$G/pair-acceptance.json" ] || cp .gpu/pair-acceptance.json "$G/"
common=(--out "$OUT" --bin-dir "$G/llama-cuda/bin" --draft "qwen2.5-0.5b=$M/0.5b.gguf")
stamp "ceiling"
py scripts/gpu/measure.py ceiling "${common[@]}" --target "qwen2.5-1.5b=$M/1.5b.gguf" \
  --target "qwen2.5-14b=$M/14b.gguf" --target "qwen2.5-7b=$M/7b.gguf"
stamp "serve 1.5b"
py scripts/gpu/measure.py serve "${common[@]}" --rates "$G/pair-acceptance.json" --aa \
  --target "qwen2.5-1.5b=$M/1.5b.gguf"
stamp "serve 14b"
py scripts/gpu/measure.py serve "${common[@]}" --rates "$G/pair-acceptance.json" --tasks 4 \
  --target "qwen2.5-14b=$M/14b.gguf"
stamp "serve 7b"
py scripts/gpu/measure.py serve "${common[@]}" --rates "$G/pair-acceptance.json" --tasks 4 \
  --target "qwen2.5-7b=$M/7b.gguf"
stamp "ALL DONE"
