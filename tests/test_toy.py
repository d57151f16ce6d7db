"""Tests of the offline toy world (`healtrl.toy`): tokenizer, model factory, tasks, reward, warm-up, cache, GRPO."""

from __future__ import annotations

import json
import shutil
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback

from healtrl.toy import (
    ARCHITECTURES,
    CHARACTERS,
    FAMILIES,
    SPECIAL_TOKENS,
    build_model,
    build_tokenizer,
    completion_text,
    history_points,
    is_toy_model_name,
    load_toy_model,
    make_dataset,
    make_split,
    parse_toy_model_name,
    reproduce_entropy_collapse,
    sampled_accuracy,
    save_tokenizer,
    toy_grpo_config,
    toy_model_info,
    toy_model_path,
    toy_reward,
    warmup,
)
from healtrl.toy import cache as toy_cache

MODEL = "healtrl-toy/qwen2-add"


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One torch thread: the fastest for these tiny models, and it keeps the file quick on a busy machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


@pytest.fixture(scope="module")
def toy_cache_dir(tmp_path_factory, toy_model_dir):
    """A cache holding the default warmed-up "healtrl-toy/qwen2-add": a copy of the session's build (the build is
    deterministic: `test_warmup_deterministic`), so the module does not pay a second warm-up."""
    cache_dir = tmp_path_factory.mktemp("healtrl-cache")
    shutil.copytree(toy_model_dir, cache_dir / Path(toy_model_dir).name)
    assert toy_model_path(MODEL, cache_dir) == str(cache_dir / Path(toy_model_dir).name)
    return cache_dir


def _question(prompt) -> str:
    return prompt[0]["content"]


# ----------------------------------------------------------------------------------------------------------- tokenizer


def test_tokenizer_special_tokens(tokenizer):
    assert len(tokenizer) == len(SPECIAL_TOKENS) + len(CHARACTERS) == 103
    assert tokenizer.pad_token == "<|pad|>" and tokenizer.pad_token_id == 0
    assert tokenizer.eos_token == "<|end|>"
    assert tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids("<|end|>")
    assert tokenizer.bos_token is None
    assert len(set(tokenizer.convert_tokens_to_ids(list(SPECIAL_TOKENS)))) == len(SPECIAL_TOKENS)


def test_chat_template_generation_prompt(tokenizer):
    prompt = [{"role": "user", "content": "3+5="}]
    text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
    assert text == "<|user|>3+5=<|assistant|>"
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)[
        "input_ids"
    ]
    assert tokenizer.convert_ids_to_tokens(ids) == ["<|user|>", "3", "+", "5", "=", "<|assistant|>"]
    # Batched, as TRL's GRPOTrainer calls it.
    batch = tokenizer.apply_chat_template([prompt, prompt], add_generation_prompt=True, tokenize=True, return_dict=True)
    assert batch["input_ids"] == [ids, ids]


def test_chat_template_full_conversation(tokenizer):
    conversation = [
        {"role": "system", "content": [{"type": "text", "text": "be brief"}]},
        {"role": "user", "content": "3+5="},
        {"role": "assistant", "content": "8"},
    ]
    text = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert text == "<|system|>be brief<|user|>3+5=<|assistant|>8<|end|>"
    out = tokenizer.apply_chat_template(
        conversation, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    masked = [t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m]
    assert tokenizer.convert_ids_to_tokens(masked) == ["8", "<|end|>"]
    with pytest.raises(Exception, match="no role"):
        tokenizer.apply_chat_template([{"role": "robot", "content": "x"}], tokenize=False)


def test_encode_decode_round_trip(tokenizer):
    for text in ["0123456789", "3+5=8", "max(3,7)=7", "rev(abc)=cba", "a b\nc\t?:<>*-", "Hello, World!"]:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert len(ids) == len(text)  # one token per character
        assert tokenizer.decode(ids) == text
    digits = tokenizer("0123456789", add_special_tokens=False)["input_ids"]
    assert tokenizer.convert_ids_to_tokens(digits) == list("0123456789")
    # Characters outside the vocabulary become <|unk|> instead of failing.
    assert tokenizer("é", add_special_tokens=False)["input_ids"] == [tokenizer.unk_token_id]
    assert tokenizer.decode([digits[8], tokenizer.eos_token_id, 0, 0], skip_special_tokens=True) == "8"


@pytest.mark.parametrize("portable", [True, False])
def test_tokenizer_save_load(tokenizer, tmp_path, portable):
    if portable:
        save_tokenizer(tokenizer, tmp_path)
        config = json.loads((tmp_path / "tokenizer_config.json").read_text())
        assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
        assert config["chat_template"] == tokenizer.chat_template
        assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    else:
        tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert (loaded.pad_token, loaded.eos_token, loaded.unk_token) == ("<|pad|>", "<|end|>", "<|unk|>")
    assert loaded.chat_template == tokenizer.chat_template
    prompt = [{"role": "user", "content": "max(3,7)="}]
    assert loaded.apply_chat_template(prompt, add_generation_prompt=True) == tokenizer.apply_chat_template(
        prompt, add_generation_prompt=True
    )
    assert loaded.decode(loaded("rev(abc)=cba")["input_ids"]) == "rev(abc)=cba"


# -------------------------------------------------------------------------------------------------------------- model


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_build_model(arch, tokenizer):
    model = build_model(arch, hidden_size=64, num_layers=2, num_heads=4, tokenizer=tokenizer, seed=0)
    assert type(model) is ARCHITECTURES[arch][1]
    assert model.config.vocab_size == len(tokenizer)
    assert model.dtype == torch.float32
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert model.lm_head.weight is model.get_input_embeddings().weight  # tied by default
    prompt = [{"role": "user", "content": "3+5="}]
    ids = torch.tensor(
        [tokenizer.apply_chat_template(prompt, add_generation_prompt=True, return_dict=True)["input_ids"]]
    )
    logits = model(ids).logits
    assert logits.shape == (1, ids.shape[1], len(tokenizer))
    assert torch.isfinite(logits).all()
    # Same seed, same weights; another seed, other weights.
    again = build_model(arch, hidden_size=64, tokenizer=tokenizer, seed=0)
    other = build_model(arch, hidden_size=64, tokenizer=tokenizer, seed=1)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), again.parameters()))
    assert not torch.equal(model.lm_head.weight, other.lm_head.weight)


def test_build_model_options(tokenizer):
    model = build_model("llama", hidden_size=32, num_layers=1, num_heads=2, tie_word_embeddings=False)
    assert model.lm_head.weight is not model.get_input_embeddings().weight
    assert model.config.num_hidden_layers == 1 and model.config.hidden_size == 32
    with pytest.raises(ValueError, match="Unknown toy architecture"):
        build_model("gpt2")
    with pytest.raises(ValueError, match="divisible"):
        build_model("qwen2", hidden_size=30, num_heads=4)


# -------------------------------------------------------------------------------------------------------------- tasks


def test_make_dataset_columns_and_answers():
    for name, family in FAMILIES.items():
        data = make_dataset(name, 50, seed=0)
        assert data.column_names == ["prompt", "answer", "domain", "task"]
        assert len(data) == 50
        assert set(data["domain"]) == {family.domain} and set(data["task"]) == {name}
        for prompt, answer in zip(data["prompt"], data["answer"]):
            assert len(prompt) == 1 and prompt[0]["role"] == "user"
            # Answer-only families: at most 3 characters; the reasoning world's: written-out steps (<= 31 + <|end|>).
            assert isinstance(answer, str) and 1 <= len(answer) <= (
                3 if family.verify is None and name != "sumchain" else 31
            )
    assert FAMILIES["add"].domain == "target"
    assert {FAMILIES["compare"].domain, FAMILIES["reverse"].domain} == {"general"}


def test_family_answers_are_correct():
    assert FAMILIES["add"].problem(35) == ("3+5=", "8")
    assert FAMILIES["mul"].problem(79) == ("7*9=", "63")
    assert FAMILIES["compare"].problem(37) == ("max(3,7)=", "7")
    assert FAMILIES["reverse"].problem(0) == ("rev(aaa)=", "aaa")
    assert FAMILIES["reverse"].problem(26 * 26 + 2 * 26 + 3) == ("rev(bcd)=", "dcb")
    for prompt, answer in zip(*make_dataset("add", 100).select_columns(["prompt", "answer"]).to_dict().values()):
        a, b = _question(prompt).rstrip("=").split("+")
        assert answer == str(int(a) + int(b))


def test_make_dataset_determinism_and_coverage():
    a, b = make_dataset("reverse", 64, seed=3), make_dataset("reverse", 64, seed=3)
    assert a.to_dict() == b.to_dict()
    assert make_dataset("reverse", 64, seed=4)["answer"] != a["answer"]
    # Without replacement while possible: 100 rows cover all 100 additions, 250 rows repeat each 2 or 3 times.
    assert len({_question(p) for p in make_dataset("add", 100)["prompt"]}) == 100
    counts = {}
    for p in make_dataset("add", 250)["prompt"]:
        counts[_question(p)] = counts.get(_question(p), 0) + 1
    assert set(counts.values()) == {2, 3}
    assert len(make_dataset("add", 0)) == 0


def test_make_dataset_mixture():
    data = make_dataset(["add", "compare", "reverse"], 30, seed=0)
    assert sorted(data["task"]) == ["add"] * 10 + ["compare"] * 10 + ["reverse"] * 10
    assert data["task"][:10] != ["add"] * 10  # shuffled together
    assert set(data["domain"]) == {"target", "general"}
    assert make_dataset(["add", "compare", "reverse"], 30, seed=0).to_dict() == data.to_dict()
    with pytest.raises(ValueError, match="Unknown toy task family"):
        make_dataset("division", 10)


def test_make_split_disjoint():
    split = make_split("add", n_train=1000, n_test=20, seed=0)
    train = [_question(p) for p in split["train"]["prompt"]]
    test = [_question(p) for p in split["test"]["prompt"]]
    assert len(train) == 1000 and len(test) == len(set(test)) == 20
    assert not set(train) & set(test)
    assert len(set(train)) == 80  # the other 80 additions, repeated
    big = make_split("reverse", n_train=500, n_test=100, seed=1)
    assert len(set(big["train"]["answer"])) == 500 and not set(big["train"]["answer"]) & set(big["test"]["answer"])
    mixed = make_split(["add", "compare"], n_train=40, n_test=10, seed=2)
    assert sorted(set(mixed["test"]["task"])) == ["add", "compare"]
    assert make_split("add", 1000, 20, seed=0)["test"].to_dict() == split["test"].to_dict()
    with pytest.raises(ValueError, match="leaves none for training"):
        make_split("add", 10, 100)


# ------------------------------------------------------------------------------------------------------------- reward


def test_toy_reward_values():
    assert toy_reward.__name__ == "toy_reward"
    completions = [
        "8",  # correct
        " 8\n",  # correct, surrounding whitespace
        "9",  # wrong
        "88",  # wrong
        "8 apples",  # wrong
        [{"role": "assistant", "content": "8"}],  # conversational, correct
        [{"role": "assistant", "content": " 7 "}],  # conversational, wrong
        [{"role": "assistant", "content": [{"type": "text", "text": "8"}]}],  # content blocks, correct
    ]
    rewards = toy_reward(prompts=[[{"role": "user", "content": "3+5="}]] * 8, completions=completions, answer=["8"] * 8)
    assert rewards == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0]
    assert all(isinstance(r, float) for r in rewards)


def test_toy_reward_malformed_never_raises():
    malformed = [
        None,
        "",
        "   ",
        "8" * 1_000_000,
        "８",  # full-width digit
        "8\u200b",  # zero-width space
        "\udcff",  # lone surrogate
        "🙂" * 100,
        [],
        {},
        [{"role": "assistant"}],
        [{"role": "assistant", "content": None}],
        [{"content": 8}],
        [None, 3],
        42,
        8.0,
        object(),
    ]
    rewards = toy_reward(prompts=None, completions=malformed, answer=["8"] * len(malformed))
    assert rewards == [0.0] * len(malformed)
    # Missing or misaligned answers score 0 rather than raising, and the output always matches the completions.
    assert toy_reward(None, ["8", "8"], answer=None) == [0.0, 0.0]
    assert toy_reward(None, ["8", "8"], answer=["8"]) == [1.0, 0.0]
    assert toy_reward(None, ["8"], answer=[8]) == [1.0]
    assert toy_reward(None, [], answer=[]) == []
    # Each completion is judged against its own answer, so one function serves every family.
    assert toy_reward(None, ["8", "7", "cba"], answer=["8", "7", "abc"], task=["add", "compare", "reverse"]) == [
        1.0,
        1.0,
        0.0,
    ]


def test_completion_text():
    assert completion_text("x") == "x"
    assert completion_text([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]) == "a"
    assert completion_text({"role": "assistant", "content": "a"}) == "a"
    assert completion_text(None) is None and completion_text([1, 2]) is None


# ------------------------------------------------------------------------------------------------------------ warm-up


def test_warmup_reaches_target(tokenizer):
    model = build_model("qwen2", hidden_size=64, num_layers=1, tokenizer=tokenizer, seed=0)
    probe = make_dataset("add", 128, seed=5)
    before = sampled_accuracy(model, tokenizer, probe)
    stats = warmup(model, tokenizer, family="add", target_accuracy=0.12, max_steps=300, seed=0, probe_size=128)
    assert stats["reached"] and stats["accuracy"] >= 0.12
    assert 0 < stats["steps"] <= 300 and stats["steps"] == stats["history"][-1][0]
    assert all(acc < 0.12 for _, acc in stats["history"][:-1])  # it stopped at the first probe over the target
    assert sampled_accuracy(model, tokenizer, probe) > before
    assert not model.training


def test_warmup_deterministic(tokenizer):
    def run():
        model = build_model("qwen3", hidden_size=32, num_layers=1, tokenizer=tokenizer, seed=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the unreachable target warns
            stats = warmup(model, tokenizer, family="compare", target_accuracy=1.1, max_steps=6, seed=7, probe_size=32)
        return model, stats

    (m1, s1), (m2, s2) = run(), run()
    assert s1["steps"] == 6 and not s1["reached"]
    assert s1["history"] == s2["history"] and s1["loss"] == s2["loss"]
    assert all(torch.equal(a, b) for a, b in zip(m1.parameters(), m2.parameters()))
    assert torch.get_num_threads() == 1  # restored


# -------------------------------------------------------------------------------------------------------------- cache


def test_toy_model_names():
    assert is_toy_model_name(MODEL) and not is_toy_model_name("Qwen/Qwen2-0.5B")
    assert parse_toy_model_name("healtrl-toy/llama-add+compare") == ("llama", ["add", "compare"])
    for bad in ["qwen2-add", "healtrl-toy/gpt2-add", "healtrl-toy/qwen2", "healtrl-toy/qwen2-division"]:
        with pytest.raises(ValueError):
            parse_toy_model_name(bad)


def test_load_toy_model_cache_hit(toy_cache_dir, monkeypatch):
    path = toy_model_path(MODEL, toy_cache_dir)
    info = toy_model_info(path)
    assert info["spec"]["arch"] == "qwen2" and info["spec"]["family"] == ["add"]
    assert info["warmup"]["reached"] and info["warmup"]["accuracy"] >= 0.2

    def no_rebuild(*args, **kwargs):
        raise AssertionError("the cached model was rebuilt")

    monkeypatch.setattr(toy_cache, "_build", no_rebuild)
    start = time.perf_counter()
    model, tokenizer = load_toy_model(MODEL, toy_cache_dir)
    assert time.perf_counter() - start < 5  # typically ~0.02 s
    again, _ = load_toy_model(MODEL, toy_cache_dir)
    state, state_again = model.state_dict(), again.state_dict()
    assert state.keys() == state_again.keys() and all(torch.equal(state[k], state_again[k]) for k in state)
    assert model.config.name_or_path == path and not model.training
    assert tokenizer.chat_template is not None and tokenizer.eos_token == "<|end|>"
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id
    # A plain Hub-style load of the folder works too.
    plain = AutoModelForCausalLM.from_pretrained(path)
    assert torch.equal(plain.lm_head.weight, model.lm_head.weight)
    # Other parameters are another cache entry.
    with pytest.raises(AssertionError, match="rebuilt"):
        toy_model_path(MODEL, toy_cache_dir, seed=1)


def test_toy_model_path_concurrent_builders(tmp_path, monkeypatch):
    """Two simultaneous builders (e.g. two torchrun ranks): one builds, the other waits and reuses its result."""
    built = []
    real_build = toy_cache._build

    def slow_fake_build(spec, folder):
        built.append(spec)
        time.sleep(0.3)
        staging = folder.parent / f".{folder.name}.staging"
        staging.mkdir()
        (staging / toy_cache.METADATA_FILE).write_text(json.dumps({"spec": spec}))
        staging.rename(folder)

    monkeypatch.setattr(toy_cache, "_build", slow_fake_build)
    paths = []
    threads = [threading.Thread(target=lambda: paths.append(toy_model_path(MODEL, tmp_path))) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(built) == 1 and len(set(paths)) == 1 and len(paths) == 2
    assert real_build is not slow_fake_build
    assert not [p for p in tmp_path.iterdir() if ".staging" in p.name or ".tmp-" in p.name]


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("HEALTRL_CACHE", str(tmp_path))
    assert toy_cache.default_cache_dir() == tmp_path
    monkeypatch.delenv("HEALTRL_CACHE")
    assert toy_cache.default_cache_dir().parts[-2:] == (".cache", "healtrl")


# --------------------------------------------------------------------------------------------------------------- GRPO


def test_short_grpo_run_logs_entropy_and_reward(toy_cache_dir, tmp_path):
    history = reproduce_entropy_collapse(
        steps=3,
        seed=0,
        output_dir=str(tmp_path),
        cache_dir=toy_cache_dir,
        per_device_train_batch_size=16,
        num_generations=4,
    )
    steps = [entry for entry in history if "entropy" in entry]
    assert [entry["step"] for entry in steps] == [1, 2, 3]
    for entry in steps:
        assert 0.0 < entry["entropy"] < 5.0  # nats; log(103) = 4.6
        assert 0.0 <= entry["reward"] <= 1.0
        assert entry["rewards/toy_reward/mean"] == entry["reward"]
        assert entry["completions/max_length"] <= 4
    assert history_points(history, [1, 3, 99]).keys() == {1, 3}


@pytest.mark.slow
def test_entropy_collapse_1000_steps(tmp_path):
    """The phenomenon itself: with plain GRPO, entropy collapses while the reward rises (a few minutes)."""
    history = reproduce_entropy_collapse(steps=1000, seed=0, cache_dir=tmp_path / "cache")
    points = history_points(history, [1, 100, 300, 1000])

    def window(first: int, last: int, key: str) -> float:
        values = [e[key] for e in history if "entropy" in e and first <= e["step"] <= last]
        return sum(values) / len(values)

    start_entropy, end_entropy = window(1, 20, "entropy"), window(981, 1000, "entropy")
    start_reward, end_reward = window(1, 20, "reward"), window(981, 1000, "reward")
    print(points, start_entropy, end_entropy, start_reward, end_reward)
    assert end_entropy < 0.25 * start_entropy
    assert end_reward > start_reward + 0.4


def test_grpo_trainer_from_toy_model_path(toy_cache_dir, tmp_path):
    """A toy model folder works where TRL expects a Hub id, including the reference model that beta > 0 loads."""
    from trl import GRPOTrainer

    path = toy_model_path(MODEL, toy_cache_dir)
    args = toy_grpo_config(str(tmp_path), steps=1, per_device_train_batch_size=8, num_generations=4, beta=0.04)
    trainer = GRPOTrainer(model=path, reward_funcs=toy_reward, args=args, train_dataset=make_dataset("add", 16))
    trainer.remove_callback(PrinterCallback)
    assert trainer.processing_class.eos_token == "<|end|>" and trainer.ref_model is not None
    trainer.train()
    entry = trainer.state.log_history[0]
    assert {"entropy", "reward", "kl"} <= entry.keys()
