"""HEAL's general-domain data selection (HEAL, arXiv:2604.17928, §3.1, eq. 1): the score against a Python-loop reference
and hand values, the rollout entropies against a float64 softmax of the model's logits, and `healtrl select` end to end
on the toy world (output dataset, resume after an interruption, settings mismatch, bad input, Hub push, YAML config).

The pool is `healtrl-toy/add+compare`: the toy model `healtrl-toy/qwen2-add` (warmed up on addition) answers about a
quarter of the additions and few comparisons, so the questions get different uncertainties and the ranking is not
trivial.
"""

from __future__ import annotations

import importlib.util
import json
import math
import random
from fractions import Fraction
from pathlib import Path

import pytest
import torch

import healtrl.cli.select as select_cli
import healtrl.selection.pipeline as selection
from healtrl.cli.select import select_main
from healtrl.functional import selection_scores, top_fraction_counts
from healtrl.selection.pipeline import rollout_entropies

MODEL = "healtrl-toy/qwen2-add"
POOL = "healtrl-toy/add+compare"
BASE_ARGS = [
    "--model", MODEL, "--dataset", POOL, "--reward", "toy", "--num_rollouts", "4", "--top_k", "6",
    "--max_questions", "20", "--max_new_tokens", "4", "--temperature", "1.0", "--batch_size", "4", "--no_progress",
]  # fmt: skip


# ---------------------------------------------------------------------------------------------------------------
# The score: selection_scores
# ---------------------------------------------------------------------------------------------------------------
def _reference_count(length: int, fraction: float) -> int:
    if length == 0:
        return 0
    # Exact rational arithmetic on the decimal the user wrote (0.2 = 1/5), independent of the float rounding rule.
    return max(1, math.ceil(Fraction(str(fraction)) * length))


def _reference_scores(correct, entropies, fraction):
    out = {"accuracy": [], "uncertainty": [], "diversity": [], "score": []}
    for row, rollouts in zip(correct, entropies):
        acc = sum(float(c) for c in row) / len(row)
        unc = 1 - 2 * abs(acc - 0.5)
        tops = []
        for ent in rollouts:
            values = sorted(ent.tolist(), reverse=True)
            k = _reference_count(len(values), fraction)
            if k:
                tops.append(sum(values[:k]) / k)
        div = sum(tops) / len(tops) if tops else 0.0
        for key, value in zip(out, (acc, unc, div, unc * div)):
            out[key].append(value)
    return out


def test_top_fraction_counts_rule():
    lengths = torch.tensor([0, 1, 4, 5, 6, 10, 11, 15, 16, 3072])
    assert top_fraction_counts(lengths, 0.2).tolist() == [0, 1, 1, 1, 2, 2, 3, 3, 4, 615]
    assert top_fraction_counts(lengths, 1.0).tolist() == lengths.tolist()
    rng = random.Random(0)
    for _ in range(200):
        length, fraction = rng.randint(0, 5000), rng.choice([0.05, 0.1, 0.2, 0.25, 0.3, 0.5, 0.7, 0.9])
        assert top_fraction_counts(torch.tensor([length]), fraction).item() == _reference_count(length, fraction)


def test_selection_scores_hand_values():
    correct = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 0, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    ent = [torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]), torch.full((10,), 0.5), torch.zeros(0), torch.arange(15.0)]
    # top-20%: k = 1 -> 5.0; k = 2 -> 0.5; empty -> skipped; k = 3 of 0..14 -> (14 + 13 + 12) / 3 = 13.
    entropies = [ent, ent, [torch.zeros(0)] * 4, [ent[0], ent[0], ent[0], ent[1]]]
    out = selection_scores(correct, entropies)
    assert out["accuracy"].tolist() == [0.5, 1.0, 0.0, 0.25]
    assert out["uncertainty"].tolist() == [1.0, 0.0, 0.0, 0.5]  # acc 1/2 -> 1; acc 0 or 1 -> 0
    diversity = (5.0 + 0.5 + 13.0) / 3
    torch.testing.assert_close(out["diversity"], torch.tensor([diversity, diversity, 0.0, (3 * 5.0 + 0.5) / 4]))
    torch.testing.assert_close(out["score"], out["uncertainty"] * out["diversity"])
    assert all(v.dtype == torch.float32 and v.shape == (4,) for v in out.values())
    # 0/1 floats work like booleans.
    again = selection_scores(correct.float(), entropies)
    assert all(torch.equal(again[k], out[k]) for k in out)


def test_selection_scores_matches_python_loop():
    gen = torch.Generator().manual_seed(0)
    num_q, num_n = 7, 5
    correct = torch.rand(num_q, num_n, generator=gen) < 0.4
    entropies = [
        [torch.rand(int(torch.randint(0, 40, (1,), generator=gen)), generator=gen) * 3 for _ in range(num_n)]
        for _ in range(num_q)
    ]
    entropies[2] = [torch.zeros(0)] * num_n  # a question with only empty rollouts
    for fraction in (0.2, 0.5, 1.0, 0.01):
        out = selection_scores(correct, entropies, top_fraction=fraction)
        ref = _reference_scores(correct.tolist(), entropies, fraction)
        for key in out:
            torch.testing.assert_close(out[key], torch.tensor(ref[key], dtype=torch.float32), rtol=1e-6, atol=1e-6)
    assert out["diversity"][2] == 0


def test_selection_scores_rejects_bad_input():
    ok = [[torch.ones(3), torch.ones(2)]]
    with pytest.raises(ValueError, match="2-D"):
        selection_scores(torch.ones(2), ok)
    with pytest.raises(ValueError, match="0/1"):
        selection_scores(torch.tensor([[0.5, 1.0]]), ok)
    with pytest.raises(ValueError, match="2 questions"):
        selection_scores(torch.ones(1, 2), ok + ok)
    with pytest.raises(ValueError, match="rollouts"):
        selection_scores(torch.ones(1, 3), ok)
    with pytest.raises(ValueError, match="1-D"):
        selection_scores(torch.ones(1, 2), [[torch.ones(2, 2), torch.ones(2)]])
    with pytest.raises(ValueError, match="non-finite"):
        selection_scores(torch.ones(1, 2), [[torch.tensor([1.0, math.nan]), torch.ones(2)]])
    for bad in (0.0, 1.5, -0.2, math.nan):
        with pytest.raises(ValueError, match="top_fraction"):
            selection_scores(torch.ones(1, 2), ok, top_fraction=bad)
    with pytest.raises(ValueError, match="N = 0"):
        selection_scores(torch.ones(1, 0), [[]])


# ---------------------------------------------------------------------------------------------------------------
# Rollout entropies from the policy
# ---------------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def toy_model():
    from healtrl.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(MODEL, dtype=torch.float32)
    return model.eval(), tokenizer


def _reference_entropies(model, prompt, completion, temperature):
    """H(softmax(logits / T)) at each completion token, float64, one unpadded sequence at a time."""
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double() / temperature
    logp = logits.log_softmax(-1)
    ent = -(logp.exp() * logp).sum(-1)
    return ent[len(prompt) - 1 : len(prompt) + len(completion) - 1]


def test_rollout_entropies_match_float64_softmax(toy_model):
    model, _ = toy_model
    gen = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    prompts = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (6, 1, 9, 4)]
    completions = [torch.randint(3, vocab, (n,), generator=gen).tolist() for n in (5, 3, 0, 12)]
    for temperature, batch_size in ((0.7, None), (1.3, 3)):
        got = rollout_entropies(model, prompts, completions, temperature=temperature, batch_size=batch_size)
        assert [g.numel() for g in got] == [5, 3, 0, 12]
        for g, p, c in zip(got, prompts, completions):
            ref = _reference_entropies(model, p, c, temperature)
            torch.testing.assert_close(g.double(), ref, rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# `healtrl select` end to end
# ---------------------------------------------------------------------------------------------------------------
def _records(folder) -> dict[int, dict]:
    lines = Path(folder, selection.RECORDS_FILE).read_text().splitlines()
    return {r["index"]: r for r in map(json.loads, lines)}


def _selected(folder) -> list[dict]:
    return [json.loads(line) for line in Path(folder, selection.SELECTED_JSONL).read_text().splitlines()]


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    """One uninterrupted run, with the rollout entropies and their sequences captured for the reference check."""
    out = tmp_path_factory.mktemp("select") / "full"
    captured = []
    original = selection.rollout_entropies

    def capture(model, prompt_ids, completion_ids, **kwargs):
        result = original(model, prompt_ids, completion_ids, **kwargs)
        captured.append((list(prompt_ids), list(completion_ids), kwargs["temperature"], result))
        return result

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(selection, "rollout_entropies", capture)
        assert select_main([*BASE_ARGS, "--output_dir", str(out)]) == 0
    return out, captured


def test_run_entropies_match_reference_and_records(full_run, toy_model):
    out, captured = full_run
    model, _ = toy_model
    records = _records(out)
    assert len(records) == 20 and len(captured) == 5  # 20 questions in batches of 4
    flat = [(p, c, t, e) for prompts, comps, t, ents in captured for p, c, e in zip(prompts, comps, ents)]
    assert len(flat) == 20 * 4
    for p, c, t, e in flat:
        assert t == 1.0 and len(c) >= 1
        torch.testing.assert_close(e.double(), _reference_entropies(model, p, c, t), rtol=1e-5, atol=1e-5)
    # Records (in scoring order) hold each question's rollouts in order: their mean entropies and Diversity.
    order = sorted(records)
    for q, index in enumerate(order):
        rec = records[index]
        rollouts = flat[q * 4 : (q + 1) * 4]
        assert rec["lengths"] == [len(c) for _, c, _, _ in rollouts]
        assert rec["mean_entropy"] == pytest.approx([e.double().mean().item() for *_, e in rollouts], rel=1e-9)
        ref = _reference_scores([[r > 0.5 for r in rec["rewards"]]], [[e for *_, e in rollouts]], 0.2)
        for key in ("accuracy", "uncertainty", "diversity", "score"):
            assert rec[key] == pytest.approx(ref[key][0], rel=1e-6, abs=1e-7)


def test_run_output_dataset(full_run):
    from datasets import load_from_disk

    from healtrl.data import load_train_dataset

    out, _ = full_run
    records = _records(out)
    selected = load_from_disk(str(out / selection.SELECTED_DIR))
    pool = load_train_dataset(POOL, split="train")
    assert selected.column_names == [*pool.column_names, "accuracy", "uncertainty", "diversity", "score", "pool_index"]
    assert len(selected) == 6
    scores = selected["score"]
    assert list(scores) == sorted(scores, reverse=True)
    best = sorted(records.values(), key=lambda r: (-r["score"], r["index"]))[:6]
    assert list(selected["pool_index"]) == [r["index"] for r in best]
    assert any(s > 0 for s in scores) and len(set(records[i]["accuracy"] for i in records)) > 1
    for row in selected:
        assert row["prompt"] == pool[row["pool_index"]]["prompt"] and row["answer"] == pool[row["pool_index"]]["answer"]
        rec = records[row["pool_index"]]
        assert row["score"] == pytest.approx(row["uncertainty"] * row["diversity"], rel=1e-6)
        assert row["accuracy"] == pytest.approx(sum(r > 0.5 for r in rec["rewards"]) / 4)
    assert _selected(out) == [dict(row) for row in selected]


def test_resume_after_interruption_equals_uninterrupted_run(full_run, tmp_path, monkeypatch):
    full, _ = full_run
    out = tmp_path / "resumed"
    original = selection._score_batch
    scored: list[list[int]] = []

    def interrupt_after_two(batch, *args, **kwargs):
        if len(scored) == 2:
            raise RuntimeError("simulated interruption")
        scored.append(list(batch))
        return original(batch, *args, **kwargs)

    monkeypatch.setattr(selection, "_score_batch", interrupt_after_two)
    with pytest.raises(RuntimeError, match="simulated interruption"):
        select_main([*BASE_ARGS, "--output_dir", str(out)])
    first = [i for batch in scored for i in batch]
    assert sorted(_records(out)) == sorted(first) and len(first) == 8
    with open(out / selection.RECORDS_FILE, "a") as f:  # a torn line, as a kill during a write leaves
        f.write('{"index": 3, "prompt_sha": "ab')

    def record_batches(batch, *args, **kwargs):
        scored.append(list(batch))
        return original(batch, *args, **kwargs)

    scored.clear()
    monkeypatch.setattr(selection, "_score_batch", record_batches)
    assert select_main([*BASE_ARGS, "--output_dir", str(out)]) == 0
    second = [i for batch in scored for i in batch]
    assert not set(first) & set(second) and len(second) == 12  # finished questions are not generated again
    assert _records(out) == _records(full)
    assert _selected(out) == _selected(full)
    # Nothing left to do: a third run generates nothing, and a new top_k needs no new rollouts.
    scored.clear()
    assert select_main([*BASE_ARGS, "--output_dir", str(out), "--top_k", "3"]) == 0
    assert scored == [] and _selected(out) == _selected(full)[:3]


def test_settings_mismatch_needs_new_folder_or_overwrite(full_run, tmp_path, capsys):
    out = tmp_path / "run"
    args = [*BASE_ARGS, "--max_questions", "4", "--top_k", "2", "--output_dir", str(out)]
    assert select_main(args) == 0
    capsys.readouterr()
    assert select_main([*args, "--temperature", "0.5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "temperature: 1.0 -> 0.5" in err and "--overwrite" in err
    assert select_main([*args, "--temperature", "0.5", "--overwrite"]) == 0
    assert json.loads((out / selection.SETTINGS_FILE).read_text())["settings"]["temperature"] == 0.5
    fingerprint = json.loads((out / selection.SETTINGS_FILE).read_text())["fingerprint"]
    assert all(r["fingerprint"] == fingerprint for r in _records(out).values())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--answer_column", "solution"], "no answer column 'solution'"),
        (["--answer_column", "solution"], "Columns found: prompt, answer, domain, task"),
        (["--question_column", "question"], "lacks. Columns found"),
        (["--top_k", "21"], "--top_k 21 is larger than the pool (20 questions"),
        (["--num_rollouts", "1"], "--num_rollouts must be >= 2"),
        (["--temperature", "0"], "--temperature must be > 0"),
        (["--top_p", "1.5"], "--top_p must be <= 1"),
        (["--batch_size", "0"], "--batch_size must be >= 1"),
        (["--max_new_tokens", "abc"], "invalid int value"),
        (["--reward", "toyy"], "Did you mean 'toy'"),
        (["--reward", "accuracy_reward"], "reads the column(s) ['solution']"),
        (["--dtype", "fp8"], "--dtype must be one of"),
        (["--push_to_hub"], "--push_to_hub needs --hub_dataset_id"),
        (["--prompt_template", "{prompt} {nope}"], "['nope']"),
        (["--prompt_template", " "], "--prompt_template is empty"),
        (["--prompt_template", "{prompt", "--prompt_column", "prompt"], "Give one of --prompt_column"),
        (["--dataset", "./missing.jsonl"], "does not exist"),
    ],
)
def test_bad_input_is_an_error(extra, message, tmp_path, capsys):
    assert select_main([*BASE_ARGS, "--output_dir", str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed")
def test_use_vllm_without_vllm_names_the_extra(tmp_path, capsys):
    assert select_main([*BASE_ARGS, "--output_dir", str(tmp_path), "--use_vllm"]) == 2
    assert "pip install healtrl[vllm]" in capsys.readouterr().err


def test_config_file_push_to_hub_and_prompt_template(tmp_path, monkeypatch, capsys):
    from datasets import Dataset

    pool = tmp_path / "pool.jsonl"
    rows = [
        {"question": f"{a}+{b}=", "choices": {"label": ["A", "B"], "text": [str(a + b), str(a + b + 1)]}, "key": "A"}
        for a, b in ((1, 2), (3, 4), (2, 2))
    ]
    pool.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "select.yaml"
    config.write_text(
        f"model: {MODEL}\ndataset: {pool}\nreward: toy\nanswer_column: key\n"
        'prompt_template: "{question}\\n{choices}\\nAnswer in \\\\boxed{{}}."\nnum_rollouts: 2\ntop_k: 2\n'
        f"max_new_tokens: 2\ntemperature: 1.0\nhub_dataset_id: me/selected\nno_progress: true\n"
        f"output_dir: {tmp_path / 'out'}\n"
    )
    pushed = []
    monkeypatch.setattr(Dataset, "push_to_hub", lambda self, repo_id, **kw: pushed.append((repo_id, len(self), kw)))
    assert select_main(["--config", str(config), "--top_k", "3"]) == 0  # the command line wins over the file
    assert pushed == [("me/selected", 3, {"private": False})]
    selected = _selected(tmp_path / "out")
    first = [r for r in selected if r["pool_index"] == 0][0]
    assert first["prompt"] == [{"role": "user", "content": "1+2=\nA. 3\nB. 4\nAnswer in \\boxed{}."}]
    assert first["answer"] == "A" and first["key"] == "A"  # the reward's column is added for training
    settings = json.loads((tmp_path / "out" / selection.SETTINGS_FILE).read_text())["settings"]
    assert settings["answer_column"] == "key" and settings["num_rollouts"] == 2

    # A plain question column, sent without the chat template.
    raw = ["--question_column", "question", "--raw_prompt", "--output_dir", str(tmp_path / "raw"), "--overwrite"]
    assert select_main(["--config", str(config), *raw]) == 2  # a template and a question column: pick one
    assert "--question_column and --prompt_template" in capsys.readouterr().err
    config.write_text(config.read_text().replace("prompt_template:", "# prompt_template:"))
    assert select_main(["--config", str(config), *raw]) == 0
    raw_selected = _selected(tmp_path / "raw")
    assert len(raw_selected) == 2 and all(r["prompt"] == r["question"] for r in raw_selected)

    capsys.readouterr()
    config.write_text(f"model: {MODEL}\nnum_rolouts: 4\n")
    assert select_main(["--config", str(config)]) == 2
    assert "unknown option 'num_rolouts'" in capsys.readouterr().err
    config.write_text(f"model: {MODEL}\nnum_rollouts: '4'\n")
    assert select_main(["--config", str(config)]) == 2
    assert "'num_rollouts'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")
def test_vllm_generation_is_seeded_per_question(tmp_path):
    """vLLM samples each question with its own seed: the batch size does not change the rollouts."""
    args = [*BASE_ARGS, "--use_vllm", "--dtype", "float32", "--max_questions", "8", "--vllm_max_model_len", "64"]
    assert select_main([*args, "--output_dir", str(tmp_path / "a")]) == 0
    assert select_main([*args, "--output_dir", str(tmp_path / "b"), "--batch_size", "3"]) == 0
    a, b = _records(tmp_path / "a"), _records(tmp_path / "b")
    assert sorted(a) == sorted(b) and len(a) == 8
    for index, rec in a.items():
        # Same samples; the entropy forward pads differently per batch, so floats agree to rounding only.
        assert rec["lengths"] == b[index]["lengths"] and rec["rewards"] == b[index]["rewards"]
        assert rec["mean_entropy"] == pytest.approx(b[index]["mean_entropy"], rel=1e-5)
    assert all(1 <= n <= 4 for r in a.values() for n in r["lengths"])


def test_shipped_configs(tmp_path):
    """configs/select_*.yaml: every key is an option of the right type; the toy one runs."""
    root = Path(__file__).resolve().parents[1] / "configs"
    for name in ("select_toy.yaml", "select_commonsenseqa_qwen3_1.7b.yaml"):
        parser = select_cli._build_parser("test")
        select_cli._apply_yaml(parser, str(root / name))
        args = parser.parse_args([])
        assert args.num_rollouts == 8 and args.top_fraction == 0.2
    assert args.top_k == 384 and args.temperature == 0.7 and args.max_new_tokens == 3072  # the paper's setup
    assert args.dataset == "task:commonsenseqa" and args.reward == "multiple_choice"

    out = tmp_path / "toy"
    assert select_main(["--config", str(root / "select_toy.yaml"), "--output_dir", str(out), "--no_progress"]) == 0
    assert len(_selected(out)) == 32 and len(_records(out)) == 80  # top 32 of the 80 `compare` training problems
