#!/usr/bin/env bash
# Lab equipment (not shipped): the follow-up GPU run after the FlashAttention K-V fix in specops.buildopts
# (GGML_CUDA_FA_QUANTS now holds the deployed f16-q8_0 pair). Same layout as run.sh; results in /tmp/g/out.
# shellcheck source=scripts/gpu/env.sh
. scripts/gpu/env.sh
( for s in 0.5b 14b; do
    py "$REPO/scripts/gpu/synth_gguf.py" --shape "qwen2.5-$s" --vocab .gpu/ggml-vocab-qwen2.gguf "$G/models/$s.gguf"
  done; touch "$G/models/done" ) > "$OUT/synth.log" 2>&1 &
stamp "build start"
py -c "import sys; from specops.cli import main; sys.exit(main())" build --source "$SRC" --backend cuda \
  --cuda-architectures 90 --commit 0c1e57098bba43ac29e6e3b677cdceebdd22334f --cuda-home "$CUDA_HOME" \
  --prefix "$G/llama-cuda" --build-dir "$G/build" --no-ccache 2>&1 | tail -5 | tee "$OUT/build.log"
cp "$G/llama-cuda/build-info.json" "$OUT/" 2>/dev/null || { stamp "BUILD FAILED"; exit 1; }
stamp "build done"
while [ ! -e "$G/models/done" ]; do sleep 2; done
B=$G/llama-cuda/bin
for d in 256 4096; do
  for kv in "-ctv q8_0" "-ctv f16"; do
    stamp "llama-bench 14b -fa on $kv -d $d"
    # shellcheck disable=SC2086
    $B/llama-bench -m "$G/models/14b.gguf" -p 1,9,17 -n 0 -d $d -r 10 -fa on $kv -o json > "$OUT/bench-14b-d$d-${kv// /}.json" 2>> "$OUT/bench.err"
  done
done
stamp "serve 14b"
py scripts/gpu/measure.py serve --out "$OUT" --bin-dir "$B" --draft "qwen2.5-0.5b=$G/models/0.5b.gguf" \
  --rates .gpu/pair-acceptance-balanced.json --tasks 4 --draft-lengths 8 16 --vram-ctx \
  --target "qwen2.5-14b=$G/models/14b.gguf"
grep -h "FlashAttention vector kernel" "$OUT"/logs/*.log | head -3 > "$OUT/fa-warnings.txt"
stamp "ALL DONE"
