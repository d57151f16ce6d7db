"""`healtrl inspect` on the toy models: the page's entropies are the exact ones, two-model mode, bad inputs."""

from __future__ import annotations

import json
import re

import pytest
import torch

from healtrl.cli import main
from healtrl.views.inspection import entropy_colour

MODEL = "healtrl-toy/qwen2-add"
MODEL2 = "healtrl-toy/qwen2-add+compare"
TEMPERATURE = 0.7
ARGS = ["--prompts", "task:toy-add", "--num_prompts", "3", "--k", "3", "--max_new_tokens", "6",
        "--temperature", str(TEMPERATURE), "--seed", "5", "--no_progress"]  # fmt: skip
SPAN = re.compile(r'<span class="tok"[^>]* data-h="([^"]+)" data-p="([^"]+)">(.*?)</span>')
COMPLETION = re.compile(r'<div class="completion">(.*?)</div></div>', re.S)


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    out = tmp_path_factory.mktemp("inspect_single")
    assert main(["inspect", "--model", MODEL, *ARGS, "--output_dir", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    out = tmp_path_factory.mktemp("inspect_pair")
    assert main(["inspect", "--model", MODEL, "--model2", MODEL2, *ARGS, "--output_dir", str(out)]) == 0
    return out


def _page_completions(html_text):
    """Per completion on the page, in order: [(entropy, probability, token text), ...]."""
    import html

    return [
        [(float(h), float(p), html.unescape(t)) for h, p, t in SPAN.findall(block)]
        for block in COMPLETION.findall(html_text)
    ]


def _reference(model_name, prompt_ids, completion_ids, temperature):
    """float64 entropy and probability of each completion token from the model's full logits at `temperature`."""
    from healtrl.toy import load_toy_model

    model, _ = load_toy_model(model_name)
    model.eval()
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].double() / temperature
    n = len(prompt_ids)
    logp = torch.log_softmax(logits[n - 1 : n - 1 + len(completion_ids)], dim=-1)
    entropy = -(logp.exp() * logp).sum(-1)
    chosen = logp[torch.arange(len(completion_ids)), torch.tensor(completion_ids)].exp()
    return entropy, chosen


def test_page_entropies_equal_exact_values(single):
    from healtrl.tasks import load_task
    from healtrl.toy import build_tokenizer, toy_reward
    from healtrl.utils.prompts import tokenize_prompts

    page = (single / "inspect.html").read_text()
    data = json.loads((single / "inspect.json").read_text())
    (run,) = data["runs"]
    assert run["temperature"] == TEMPERATURE and run["seed"] == 5
    tokenizer = build_tokenizer()
    dataset = load_task("toy-add").select(range(3))
    prompt_ids = tokenize_prompts(tokenizer, dataset["prompt"])
    shown = _page_completions(page)
    assert len(shown) == 3 * 3 and [len(p["completions"]) for p in run["prompts"]] == [3, 3, 3]
    all_h = []
    for i, prompt in enumerate(run["prompts"]):
        assert prompt["prompt"] == dataset[i]["prompt"]
        for j, c in enumerate(prompt["completions"]):
            spans = shown[i * 3 + j]
            assert [t for _, _, t in spans] == [tokenizer.decode([t]) for t in c["token_ids"]]
            ref_h, ref_p = _reference(MODEL, prompt_ids[i], c["token_ids"], TEMPERATURE)
            page_h = torch.tensor([h for h, _, _ in spans], dtype=torch.float64)
            page_p = torch.tensor([p for _, p, _ in spans], dtype=torch.float64)
            # float32 model and kernel against a float64 softmax of the same float32 hidden states
            torch.testing.assert_close(page_h, ref_h, atol=1e-5, rtol=1e-4)
            torch.testing.assert_close(page_p, ref_p, atol=1e-5, rtol=1e-4)
            assert c["entropies"] == [h for h, _, _ in spans]
            # the reward on the page is the task's reward of this completion
            expected = toy_reward(completions=[c["text"]], answer=[dataset[i]["answer"]])[0]
            assert c["reward"] == expected
            assert f"reward {expected:g}" in COMPLETION.findall(page)[i * 3 + j]
            all_h += page_h.tolist()
    assert max(all_h) - min(all_h) > 0.1  # a real spread of entropies, not a constant
    # each token's colour is the fixed scale's colour of its entropy
    first = re.search(r'style="background:(#[0-9a-f]{6});[^"]*"[^>]* data-h="([^"]+)"', page)
    assert first.group(1) == entropy_colour(float(first.group(2)))


def test_page_is_self_contained_and_png_is_png(single):
    page = (single / "inspect.html").read_text()
    assert not re.search(r"https?:", page, re.I)
    for forbidden in ("<script", "<link", "@import", "url(", "src="):
        assert forbidden not in page.lower()
    assert "nats" in page and "linear-gradient" in page  # the legend
    assert re.search(r'title="entropy [0-9.]+ nats, p = [0-9.]+"', page)
    png = (single / "inspect_summary.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    import matplotlib.image

    assert matplotlib.image.imread(single / "inspect_summary.png").shape[0] > 100


def test_two_models_side_by_side(pair, single):
    page = (pair / "inspect.html").read_text()
    runs = json.loads((pair / "inspect.json").read_text())["runs"]
    assert [r["model"] for r in runs] == [MODEL, MODEL2]
    # model 1 in two-model mode is sampled exactly as alone: same prompts, same seed
    alone = json.loads((single / "inspect.json").read_text())["runs"][0]
    assert runs[0]["prompts"] == alone["prompts"]
    assert page.count('<div class="model">') == 2 * 3
    for i in range(3):
        a, b = (r["prompts"][i] for r in runs)
        assert a["prompt"] == b["prompt"]
        h_a = [h for c in a["completions"] for h in c["entropies"]]
        h_b = [h for c in b["completions"] for h in c["entropies"]]
        delta = sum(h_b) / len(h_b) - sum(h_a) / len(h_a)
        assert f"{MODEL2}: {delta:+.4f}" in page
        for ca, cb in zip(a["completions"], b["completions"]):
            assert f"vs model 1: {cb['mean_entropy'] - ca['mean_entropy']:+.4f}" in page
    # the second model's entropies are its own exact values
    from healtrl.tasks import load_task
    from healtrl.toy import build_tokenizer
    from healtrl.utils.prompts import tokenize_prompts

    prompt_ids = tokenize_prompts(build_tokenizer(), load_task("toy-add").select(range(1))["prompt"])
    c = runs[1]["prompts"][0]["completions"][0]
    ref_h, _ = _reference(MODEL2, prompt_ids[0], c["token_ids"], TEMPERATURE)
    torch.testing.assert_close(torch.tensor(c["entropies"], dtype=torch.float64), ref_h, atol=1e-5, rtol=1e-4)


def test_text_file_prompts(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("3+4=\n\n12+30=\n")
    out = tmp_path / "out"
    assert main(["inspect", "--model", MODEL, "--prompts", str(prompts), "--k", "2", "--max_new_tokens", "4",
                 "--no_progress", "--output_dir", str(out)]) == 0  # fmt: skip
    run = json.loads((out / "inspect.json").read_text())["runs"][0]
    assert [p["prompt"] for p in run["prompts"]] == [[{"role": "user", "content": "3+4="}],
                                                      [{"role": "user", "content": "12+30="}]]  # fmt: skip
    assert all(c["reward"] is None for p in run["prompts"] for c in p["completions"])
    assert "reward n/a" in (out / "inspect.html").read_text()


@pytest.mark.parametrize(
    "case, flag, words",
    [
        ("missing_model", "--model", ["no such folder"]),
        ("missing_model2", "--model2", ["no such folder"]),
        ("empty_prompts", "--prompts", ["no prompt"]),
        ("missing_prompts", "--prompts", ["no such file"]),
        ("too_long", "--prompts", ["context", "tokens"]),
        ("no_room", "--max_new_tokens", ["context"]),
        ("greedy", "--temperature", ["> 0"]),
    ],
)
def test_bad_inputs_exit_2_naming_the_flag(tmp_path, capsys, case, flag, words):
    good = tmp_path / "good.txt"
    good.write_text("1+1=\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n")
    long = tmp_path / "long.txt"
    long.write_text("1+" * 200 + "1=\n")  # 400+ characters: the toy model's context is 256 tokens
    medium = tmp_path / "medium.txt"
    medium.write_text("1+" * 100 + "1=\n")  # fits, but not with 100 new tokens
    args = {
        "missing_model": ["--model", str(tmp_path / "nope"), "--prompts", str(good)],
        "missing_model2": ["--model", MODEL, "--model2", str(tmp_path / "nope"), "--prompts", str(good)],
        "empty_prompts": ["--model", MODEL, "--prompts", str(empty)],
        "missing_prompts": ["--model", MODEL, "--prompts", str(tmp_path / "none.txt")],
        "too_long": ["--model", MODEL, "--prompts", str(long)],
        "no_room": ["--model", MODEL, "--prompts", str(medium), "--max_new_tokens", "100"],
        "greedy": ["--model", MODEL, "--prompts", str(good), "--temperature", "0"],
    }[case]
    out = tmp_path / "out"
    assert main(["inspect", *args, "--no_progress", "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert "error: " in err
    message = err.split("error: ", 1)[1]
    assert message.startswith(flag)
    for word in words:
        assert word in message
    assert not (out / "inspect.html").exists()


def test_dataset_file_prompts(tmp_path):
    data = tmp_path / "prompts.jsonl"
    rows = [{"prompt": [{"role": "user", "content": q}], "answer": a} for q, a in [("2+2=", "4"), ("5+1=", "6")]]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "out"
    assert main(["inspect", "--model", MODEL, "--prompts", str(data), "--num_prompts", "1", "--k", "2",
                 "--max_new_tokens", "4", "--no_progress", "--output_dir", str(out)]) == 0  # fmt: skip
    run = json.loads((out / "inspect.json").read_text())["runs"][0]
    assert [p["prompt"] for p in run["prompts"]] == [rows[0]["prompt"]]
    assert len(run["prompts"][0]["completions"]) == 2


def test_high_entropy_threshold_defaults_to_the_top_fifth_of_tokens():
    from types import SimpleNamespace as NS

    from healtrl.views.inspection import high_entropy_threshold

    runs = [NS(groups=[NS(completions=[NS(entropies=[0.0, 1.0, 2.0, 3.0, 4.0])])])]
    assert high_entropy_threshold(runs, None) == pytest.approx(3.2)  # numpy's linear 80th percentile of 0..4
    assert high_entropy_threshold(runs, 0.5) == 0.5
    assert high_entropy_threshold([NS(groups=[])], None) == 0.0


def test_inspect_models_in_memory_equals_the_command(pair, tmp_path):
    """The notebooks' Python form: models already loaded, same prompts and seed -> the command's completions and
    exact entropies; the model's train/eval mode is restored; bad settings name the setting."""
    from healtrl.toy import load_toy_model
    from healtrl.views.inspection import InspectError, inspect_models

    loaded = {name: load_toy_model(name) for name in (MODEL, MODEL2)}
    loaded[MODEL][0].train()
    runs = inspect_models(
        loaded, "task:toy-add", num_prompts=3, k=3, max_new_tokens=6, temperature=TEMPERATURE, seed=5,
        output_dir=str(tmp_path),
    )  # fmt: skip
    assert loaded[MODEL][0].training and not loaded[MODEL2][0].training
    expected = json.loads((pair / "inspect.json").read_text())["runs"]
    written = json.loads((tmp_path / "inspect.json").read_text())["runs"]
    assert [r.model for r in runs] == [MODEL, MODEL2]
    for got, want in zip(written, expected):
        for g, w in zip(got["prompts"], want["prompts"]):
            assert [c["token_ids"] for c in g["completions"]] == [c["token_ids"] for c in w["completions"]]
            for cg, cw in zip(g["completions"], w["completions"]):
                torch.testing.assert_close(
                    torch.tensor(cg["entropies"]), torch.tensor(cw["entropies"]), atol=1e-6, rtol=0
                )
                assert cg["reward"] == cw["reward"]
    assert (tmp_path / "inspect.html").is_file() and (tmp_path / "inspect_summary.png").is_file()
    with pytest.raises(InspectError, match="--k must be a positive integer"):
        inspect_models(loaded, "task:toy-add", k=0)
    with pytest.raises(InspectError, match="at least one model"):
        inspect_models({}, "task:toy-add")


def test_hub_id_without_the_hub_names_the_offline_copy(tmp_path, capsys, monkeypatch):
    """A Hub id that cannot be fetched (no network) fails with exit 2, the loader's reason, and the healtrl-offline
    name that loads without the Hub (the real offline run is tests/test_inspect_smollm2.py, marked slow)."""
    import transformers

    def offline(*args, **kwargs):
        raise OSError("We couldn't connect to 'https://huggingface.co' to load the files")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    prompts = tmp_path / "p.txt"
    prompts.write_text("1+1=\n")
    hub_id = "HuggingFaceTB/SmolLM2-135M-Instruct"
    args = ["inspect", "--model", hub_id, "--prompts", str(prompts), "--no_progress", "--output_dir", str(tmp_path)]
    assert main(args) == 2
    message = capsys.readouterr().err.split("error: ", 1)[1]
    assert message.startswith(f"--model {hub_id}: could not load the model: We couldn't connect")
    assert "pass --model healtrl-offline/SmolLM2-135M-Instruct" in message
