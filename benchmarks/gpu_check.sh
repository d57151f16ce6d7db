#!/usr/bin/env bash
# The checks only a CUDA GPU can run, in one go, each with its own time limit so that one hang cannot eat the rest:
#
#   1. versions and device;
#   2. `pytest -m gpu`: the compiled Triton kernels against the float64 reference and the torch path on the device
#      (tests/test_kernels.py), EDA on CUDA (tests/test_eda.py);
#   3. the kernel benchmark in bf16 at the anchors' shape (N=16384, H=4096, V=151936; shared notes' kernel anchors)
#      and at SmolLM2-135M's head (H=576, V=49152), against naive / TRL / Liger and the cuBLAS GEMM floor;
#   4. `train.py` with OPEFO's exact estimator (the kernel's power sums) on the GPU: 20 steps of the toy run;
#   5. the kernel's block-size sweep (`benchmarks/kernel_configs.py`).
#
# Usage, from the repository root on a machine with a CUDA GPU and healtrl's dependencies:
#
#     bash benchmarks/gpu_check.sh OUTDIR
#
# Writes env.txt, gpu_tests.txt, kernel_h4096.md, kernel_h576.md, train_opefo_exact.txt, kernel_configs.md into
# OUTDIR. The toy model
# of step 4 is built on first use (or read from $HEALTRL_CACHE).
set -u
out=${1:?usage: bash benchmarks/gpu_check.sh OUTDIR}
py=${PYTHON:-python3}
mkdir -p "$out"
export PYTHONUNBUFFERED=1

{
    date -u
    nvidia-smi -L
    $py -c "import torch, triton, transformers, trl; print('torch', torch.__version__, '| triton', triton.__version__, '| transformers', transformers.__version__, '| trl', trl.__version__, '|', torch.cuda.get_device_name(), 'cc', torch.cuda.get_device_capability())"
    $py -c "import torch; from healtrl.kernels.api import resolve_backend; print('backend auto on cuda:', resolve_backend('auto', torch.device('cuda')))"
} 2>&1 | tee "$out/env.txt"

echo "== pytest -m gpu" | tee "$out/gpu_tests.txt"
timeout 170 $py -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests/test_kernels.py tests/test_eda.py \
    2>&1 | tee -a "$out/gpu_tests.txt"

echo "== kernel benchmark, anchors' shape"
timeout 150 $py benchmarks/kernel.py --device cuda --dtype bf16 --n 16384 --h 4096 --v 151936 --repeats 5 \
    --impls naive,gemms,trl-32768,trl-4096,liger,ours,ours+ps --output "$out/kernel_h4096.md" 2>&1 | tail -n 25

echo "== kernel benchmark, SmolLM2-135M's head"
timeout 70 $py benchmarks/kernel.py --device cuda --dtype bf16 --n 16384 --h 576 --v 49152 --repeats 5 \
    --impls naive,gemms,trl-32768,trl-4096,liger,ours,ours+ps --output "$out/kernel_h576.md" 2>&1 | tail -n 25

echo "== train.py, OPEFO exact estimator, on the GPU"
timeout 110 $py train.py --config configs/opefo_toy.yaml --entropy_change_estimator exact --use_cpu false \
    --max_steps 20 --output_dir /tmp/gpu_check_opefo 2>&1 | tee "$out/train_opefo_exact.txt" | tail -n 15

echo "== block-size sweep"
timeout 120 $py benchmarks/kernel_configs.py --output "$out/kernel_configs.md" 2>&1 | tail -n 45
