# Lab equipment (not shipped): what run.sh and run-fa.sh share, sourced from the repo root on the GPU machine.
# Sets G (work dir, default /tmp/g), OUT ($G/out, packed by scripts/gpu/collect), REPO, SRC (the pinned source
# tree unpacked from .gpu/llama-src.tgz) and CUDA_HOME (nvcc's toolkit); py runs python with specops and gguf-py.
set -u
G=${G:-/tmp/g}
OUT=$G/out
REPO=$(pwd)
mkdir -p "$OUT" "$G/models"
py() { PYTHONPATH="$REPO/src:$SRC/gguf-py" PYTHONUNBUFFERED=1 python3 "$@"; }
stamp() { echo "[$(date +%H:%M:%S)] $*"; }
tar xzf .gpu/llama-src.tgz -C "$G"
SRC=$G/llama.cpp-0c1e57098
CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
