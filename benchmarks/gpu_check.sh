#!/usr/bin/env bash
# The checks only a CUDA GPU can run, in one go (about 5 minutes on an H100), each with its own time limit so that
# one hang cannot eat the rest:
#
#   1. versions and device;
#   2. `pytest -m gpu`: the compiled Triton kernels of both CUDA heads (fused: tests/test_kernels.py; chunked cuBLAS
#      + Triton: tests/test_kernel_chunked.py) against the float64 reference, EDA on CUDA (tests/test_eda.py), and
#      TRL's Liger path with healtrl's trainers (tests/test_liger_path.py, where liger-kernel is installed);
#   3. the dispatch sweep (`benchmarks/lm_head_sweep.py`) at the anchors' shape (N=16384, H=4096, V=151936) and at
#      SmolLM2-135M's head (H=576, V=49152): fused vs chunked (slab widths, block sizes), TRL and the GEMM floor;
#   4. the kernel benchmark (`benchmarks/kernel.py`) at both shapes in bf16: naive, the cuBLAS GEMM floor, TRL's
#      chunked function, the fused kernel, the chunked path at its default slab and at the sweep's fastest slab;
#   5. the fused kernel's block-size sweep at SmolLM2-135M's head (`benchmarks/kernel_configs.py`).
#
# Usage, from the repository root on a machine with a CUDA GPU and healtrl's dependencies:
#
#     bash benchmarks/gpu_check.sh OUTDIR
#
# Writes log.txt (everything printed, the sweeps' tables included), gpu_tests.txt, sweep_h4096.json,
# sweep_h576.json, kernel_h4096.md, kernel_h576.md and kernel_configs_h576.md into OUTDIR.
set -u
out=${1:?usage: bash benchmarks/gpu_check.sh OUTDIR}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1
exec > >(tee -a "$out/log.txt") 2>&1

date -u
nvidia-smi -L
$py -c "import torch, triton, transformers as tf, trl; print('torch', torch.__version__, '| triton', \
triton.__version__, '| transformers', tf.__version__, '| trl', trl.__version__, '|', torch.cuda.get_device_name(), \
'cc', torch.cuda.get_device_capability())"
$py -c "import torch; from healtrl.kernels.api import resolve_backend as r; print('auto on cuda, bf16, H=4096:', \
r('auto', torch.device('cuda'), dtype=torch.bfloat16, hidden_size=4096))"

echo "== pytest -m gpu"
tests=$(ls tests/test_kernel_chunked.py tests/test_kernels.py tests/test_eda.py tests/test_liger_path.py 2>/dev/null)
timeout 140 $py -m pytest -m gpu -q -p no:cacheprovider -o addopts="" --continue-on-collection-errors $tests \
    > "$out/gpu_tests.txt" 2>&1
tail -n 15 "$out/gpu_tests.txt"

echo "== dispatch sweep, anchors' shape"
timeout 80 $py benchmarks/lm_head_sweep.py --h 4096 --v 151936 --json "$out/sweep_h4096.json"
echo "== dispatch sweep, SmolLM2-135M's head"
timeout 50 $py benchmarks/lm_head_sweep.py --h 576 --v 49152 --json "$out/sweep_h576.json"

# The chunked path at the sweep's fastest slab width (when that is not the default) beside its default
fastest_slab() {
    $py -c "import json,sys; d=json.load(open(sys.argv[1]))['median_s']; \
c=[k for k in d if k.startswith('chunked@')]; print(','+min(c, key=d.get) if c else '')" "$1" 2>/dev/null
}
for shape in "4096 151936 130" "576 49152 60"; do
    set -- $shape
    echo "== kernel benchmark, H=$1 V=$2"
    extra=$(fastest_slab "$out/sweep_h$1.json")
    timeout "$3" $py benchmarks/kernel.py --device cuda --dtype bf16 --n 16384 --h "$1" --v "$2" --repeats 5 \
        --impls "naive,gemms,trl-32768,fused,chunked${extra}" --output "$out/kernel_h$1.md" | tail -n 14
done

echo "== fused kernel block-size sweep, SmolLM2-135M's head"
timeout 70 $py benchmarks/kernel_configs.py --shapes smollm2 --output "$out/kernel_configs_h576.md" | tail -n 20
date -u
