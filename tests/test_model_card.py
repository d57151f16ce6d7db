"""Model cards: `healtrl.model_card.build_model_card` and every trainer's `save_model` / `create_model_card` /
`push_to_hub` (offline). The cards are checked for content: method, paper, setup, hyper-parameters as configured,
curves, evaluation, loading snippet and citations."""

from __future__ import annotations

import json
import re
import types
import warnings
from pathlib import Path

import pytest
import torch
import yaml

from healtrl import (
    AERConfig,
    AERTrainer,
    EntropyGRPOConfig,
    EntropyGRPOTrainer,
    GRPOBaselineConfig,
    GRPOBaselineTrainer,
    HEALConfig,
    HEALTrainer,
    OPEFOConfig,
    OPEFOTrainer,
    PosAdvConfig,
    PosAdvTrainer,
)
from healtrl.evaluation.callback import PeriodicEvalCallback
from healtrl.evaluation.engine import EvalResults, SamplingSettings, TaskResult
from healtrl.model_card import (
    HEALTRL_CITATION,
    build_model_card,
    eval_results_from_log_history,
    format_value,
    is_hub_id,
    read_eval_results,
)
from healtrl.toy.tasks import toy_reward
from healtrl.toy.tokenizer import build_tokenizer
from tests.helpers import ROOT, digit_reward, grpo_kwargs, tiny_dataset, tiny_model_path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def front_matter(card: str) -> dict:
    match = re.match(r"^---\n(.*?)\n---\n", card, re.S)
    assert match, card[:200]
    return yaml.safe_load(match.group(1))


def section(card: str, title: str) -> str:
    """The text of the `## title` section (up to the next `## `)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", card, re.S | re.M)
    assert match, f"no section '## {title}'"
    return match.group(1)


def assert_png(path: Path):
    assert path.is_file(), path
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE
    from matplotlib.image import imread

    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100


# Per trainer: config overrides (a non-default value of a method field), then what the card must show. Titles and
# BibTeX keys are typed here from the papers, independently of the trainers' class attributes.
CASES = {
    "grpo": dict(
        cls=EntropyGRPOTrainer,
        config=EntropyGRPOConfig,
        overrides={"temperature": 0.7},
        name="GRPO",
        key="shao2024deepseekmath",
        title="DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models",
        fields={"temperature": "0.7"},
        tag=None,
    ),
    "clip_cov": dict(
        cls=GRPOBaselineTrainer,
        config=GRPOBaselineConfig,
        overrides={"entropy_method": "clip_cov", "clip_cov_ratio": 0.05, "clip_cov_lb": 0.5},
        name="Clip-Cov",
        key="cui2025entropy",
        title="The Entropy Mechanism of Reinforcement Learning for Reasoning Language Models",
        fields={"entropy_method": "clip_cov", "clip_cov_ratio": "0.05", "clip_cov_lb": "0.5", "clip_cov_ub": "5.0"},
        tag="clip-cov",
    ),
    "entropy_adv": dict(
        cls=GRPOBaselineTrainer,
        config=GRPOBaselineConfig,
        overrides={"entropy_method": "entropy_adv", "entropy_adv_alpha": 0.35},
        name="Entropy-Adv",
        key="cheng2025reasoning",
        title="Reasoning with Exploration: An Entropy Perspective",
        fields={"entropy_method": "entropy_adv", "entropy_adv_alpha": "0.35", "entropy_adv_kappa": "2.0"},
        tag="entropy-adv",
    ),
    "aer": dict(
        cls=AERTrainer,
        config=AERConfig,
        overrides={"tau": 0.55, "rho": 0.3},
        name="AER",
        key="zhang_aer",
        title="Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM Reinforcement "
        "Learning",
        fields={"tau": "0.55", "rho": "0.3", "eta": "0.005", "alpha_init": "0.0"},
        tag="aer",
        summary=("aer/alpha",),
    ),
    "posadv": dict(
        cls=PosAdvTrainer,
        config=PosAdvConfig,
        overrides={"lambda_step": 0.15, "entropy_threshold": 0.35},
        name="Pos-Adv-Reweight",
        key="jin_posadv",
        title="Revisiting Entropy in Reinforcement Learning for Large Reasoning Models",
        fields={"schedule": "entropy", "lambda_step": "0.15", "entropy_threshold": "0.35", "lambda_init": "0.0"},
        tag="posadv",
        summary=("posadv/lambda",),
    ),
    "opefo": dict(
        cls=OPEFOTrainer,
        config=OPEFOConfig,
        overrides={"static_lambda": 0.003, "balance_sides": "pos"},
        name="OPEFO",
        key="opefo",
        title="Understanding and Preventing Entropy Collapse in RLVR with On-Policy Entropy Flow Optimization",
        fields={"static_lambda": "0.003", "balance_sides": "pos", "lambda_mode": "adaptive"},
        tag="opefo",
        summary=("opefo/lambda",),
    ),
    "heal": dict(
        cls=HEALTrainer,
        config=HEALConfig,
        overrides={"eda_similarity": "hti", "eda_weight": 0.5, "mixing": "fixed_share", "general_share": 0.25},
        name="HEAL",
        key="liu_heal",
        title="HEALing Entropy Collapse: Enhancing Exploration in Few-Shot RLVR via Hybrid-Domain Entropy Dynamics "
        "Alignment",
        fields={"eda_similarity": "hti", "eda_weight": "0.5", "mixing": "fixed_share", "general_share": "0.25"},
        tag="heal",
        summary=("heal/entropy_target", "heal/entropy_general"),
    ),
}


def make_trainer(case: dict, output_dir: Path, model: str | None = None, **cfg):
    dataset = tiny_dataset(16)
    dataset.info.dataset_name = "toy-add-cards"  # the card infers the dataset's name from here
    kwargs = {}
    if case["cls"] is HEALTrainer:
        kwargs["general_dataset"] = tiny_dataset(16, family="compare", seed=1)
    from transformers import set_seed

    set_seed(0)
    return case["cls"](
        model=model or tiny_model_path(output_dir.parent),
        reward_funcs=[toy_reward, digit_reward],
        args=case["config"](**grpo_kwargs(output_dir, **{**case["overrides"], **cfg})),
        train_dataset=dataset,
        processing_class=build_tokenizer(),
        **kwargs,
    )


# heal runs in the default suite; the other trainers' cards (a short training run each) are marked slow.
@pytest.mark.parametrize("name", [n if n == "heal" else pytest.param(n, marks=pytest.mark.slow) for n in CASES])
def test_saved_card_content(name, tmp_path):
    case = CASES[name]
    model_path = tiny_model_path(tmp_path)
    checkpoints = {"save_strategy": "steps", "save_steps": 2} if name == "opefo" else {}
    trainer = make_trainer(case, tmp_path / "run", model=model_path, **checkpoints)
    if name == "grpo":  # evaluation during training: eval/toy-add/... in the log history
        trainer.add_callback(PeriodicEvalCallback(["toy-add"], k=2, every_n_steps=2, num_samples=4, trainer=trainer))
    trainer.train()
    final = tmp_path / "final"
    trainer.save_model(str(final))
    card = (final / "README.md").read_text()

    # Front matter: a local base model and a non-Hub dataset name stay out of it
    meta = front_matter(card)
    assert meta["library_name"] == "transformers"
    assert "base_model" not in meta and "datasets" not in meta
    assert {"trl", "grpo", "healtrl"} <= set(meta["tags"])
    if case["tag"]:
        assert case["tag"] in meta["tags"]

    # Method and paper
    assert f"## Method: {case['name']}\n" in card
    assert f"trained with **{case['name']}** by the `{case['cls'].__name__}` of healtrl" in card
    citation = section(card, "Citation")
    assert f"{{{case['key']}," in citation and case["title"] in citation
    assert "@software{healtrl," in citation and "@software{vonwerra2020trl," in citation
    assert ("shao2024deepseekmath" in citation) and citation.count("shao2024deepseekmath") == 1

    # Training setup: base model, dataset, rewards, hyper-parameters as configured
    training = section(card, "Training")
    # a local folder by its last component only: no path of this machine is published (issue #41 item 9)
    assert "- Base model: `tiny-model` (local: a folder on the training machine" in training
    assert str(tmp_path) not in training
    assert "- Datasets: `toy-add-cards`\n" in training
    assert "`toy_reward` (weight 1.0), `digit_reward` (weight 1.0)" in training
    for field, value in case["fields"].items():
        assert f"| `{field}` | `{value}` |" in training, field
    assert "| `learning_rate` | `0.005` |" in training and "| `max_steps` | `2` |" in training
    assert "| `num_generations` | `4` |" in training

    # Entropy and reward: first and final logged values, and the curves
    history = trainer.state.log_history
    train_logs = [e for e in history if "entropy" in e]
    assert [e["step"] for e in train_logs] == [1, 2]
    for key in ("entropy", "reward"):
        first, last = train_logs[0][key], train_logs[-1][key]
        assert f"| {key} | {first:.4g} (step 1) | {last:.4g} (step 2) |" in training
    for key in case.get("summary", ()):
        last = [e[key] for e in history if key in e][-1]
        assert re.search(rf"\| {re.escape(key)} \| .* \| {re.escape(f'{last:.4g}')} \(step 2\) \|", training), key
    assert "![curves](curves.png)" in training
    assert_png(final / "curves.png")

    # Evaluation only when eval/ keys were logged
    if name == "grpo":
        evaluation = section(card, "Evaluation")
        logged = {k: v for e in history for k, v in e.items() if k.startswith("eval/toy-add/")}
        assert set(logged) >= {"eval/toy-add/avg@2", "eval/toy-add/pass@1", "eval/toy-add/pass@2"}
        avg, pass2 = logged["eval/toy-add/avg@2"], logged["eval/toy-add/pass@2"]
        assert f"| `toy-add` | 2 | {100 * avg:.1f} | {100 * avg:.1f} | {100 * pass2:.1f} |" in evaluation
    else:
        assert "## Evaluation" not in card

    if checkpoints:  # TRL writes the card into output_dir at every checkpoint; save_model into the checkpoint
        checkpoint = tmp_path / "run" / "checkpoint-2"
        for folder in (checkpoint, tmp_path / "run"):
            text = (folder / "README.md").read_text()
            assert "## Method: OPEFO\n" in text and "| `static_lambda` | `0.003` |" in text
            assert_png(folder / "curves.png")
        assert f'from_pretrained("{checkpoint}")' in (checkpoint / "README.md").read_text()

    # How to load: names the folder, and the folder loads
    loading = section(card, "How to load")
    assert f'AutoModelForCausalLM.from_pretrained("{final}")' in loading
    assert f'AutoTokenizer.from_pretrained("{final}")' in loading
    if name == "grpo":
        from transformers import AutoModelForCausalLM

        reloaded = AutoModelForCausalLM.from_pretrained(str(final))
        for (n, p), q in zip(reloaded.named_parameters(), trainer.model.parameters()):
            torch.testing.assert_close(p, q.detach(), msg=n)


@pytest.mark.parametrize("entropy_method", ["none", "kl_cov"])
def test_card_without_training_follows_entropy_method(entropy_method, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # KL-Cov on-policy warning
        trainer = make_trainer(
            CASES["clip_cov"],
            tmp_path / "run",
            entropy_method=entropy_method,
            kl_cov_coef=0.25,
        )
    trainer.create_model_card(model_name="toy-card")
    out = tmp_path / "run"
    card = (out / "README.md").read_text()
    assert card.startswith("---\n") and "# Model Card for toy-card\n" in card
    citation = section(card, "Citation")
    if entropy_method == "none":
        assert "## Method: GRPO\n" in card and "| `entropy_method` | `none` |" in card
        assert "kl_cov_coef" not in card and "cui2025entropy" not in citation
        assert "Built on GRPO" not in card  # the method is GRPO itself
    else:
        assert "## Method: KL-Cov\n" in card and "| `kl_cov_coef` | `0.25` |" in card
        assert "| `kl_cov_ratio` | `0.002` |" in card and "clip_cov_ratio" not in card
        assert "{cui2025entropy," in citation and "{shao2024deepseekmath," in citation
        assert "kl-cov" in front_matter(card)["tags"]
    # nothing logged: no curves, no summary, no evaluation
    assert not (out / "curves.png").exists()
    assert "![curves]" not in card and "### Entropy and reward" not in card and "## Evaluation" not in card

    trainer.args.entropy_method = "bogus"
    with pytest.raises(ValueError, match="entropy_method='bogus'"):
        trainer.create_model_card()


def test_push_to_hub_uploads_card_and_curves(tmp_path, monkeypatch):
    import transformers.trainer

    uploads, repos = [], []

    class FakeApi:
        def create_repo(self, repo_id, token=None, private=None, exist_ok=False, **kwargs):
            repos.append(repo_id)
            return types.SimpleNamespace(repo_id=repo_id)

        def upload_folder(self, repo_id, folder_path, **kwargs):
            files = {p.name: p.read_bytes() for p in Path(folder_path).iterdir() if p.is_file()}
            uploads.append({"repo_id": repo_id, "folder_path": folder_path, "files": files, **kwargs})
            return types.SimpleNamespace(commit_url="offline")

    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: FakeApi())
    trainer = make_trainer(CASES["aer"], tmp_path / "run", hub_model_id="someone/toy-aer", max_steps=1)
    trainer.model_card_base_model = "Qwen/Qwen3-0.6B"
    trainer.model_card_datasets = ["openai/gsm8k", "task:toy-add"]
    trainer.train()
    trainer.push_to_hub()

    assert repos == ["someone/toy-aer"] and len(uploads) == 1
    upload = uploads[0]
    assert upload["repo_id"] == "someone/toy-aer" and Path(upload["folder_path"]) == tmp_path / "run"
    files = upload["files"]
    assert files["curves.png"][:8] == PNG_SIGNATURE and "model.safetensors" in files
    card = files["README.md"].decode()
    meta = front_matter(card)
    assert meta["base_model"] == "Qwen/Qwen3-0.6B" and meta["datasets"] == ["openai/gsm8k"]
    assert meta["model_name"] == "toy-aer" and "aer" in meta["tags"]
    assert "# Model Card for toy-aer\n" in card and "## Method: AER\n" in card and "{zhang_aer," in card
    assert "[openai/gsm8k](https://huggingface.co/datasets/openai/gsm8k), `task:toy-add`" in card
    assert 'AutoModelForCausalLM.from_pretrained("someone/toy-aer")' in card
    assert "| `tau` | `0.55` |" in card and "![curves](curves.png)" in card


def test_peft_adapter_card(tmp_path):
    pytest.importorskip("peft")
    from peft import LoraConfig

    model_path = tiny_model_path(tmp_path)
    trainer = EntropyGRPOTrainer(
        model=model_path,
        reward_funcs=[toy_reward, digit_reward],
        args=EntropyGRPOConfig(**grpo_kwargs(tmp_path / "run", max_steps=1)),
        train_dataset=tiny_dataset(16),
        processing_class=build_tokenizer(),
        peft_config=LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM"),
    )
    trainer.train()
    final = tmp_path / "adapter"
    trainer.save_model(str(final))
    assert (final / "adapter_config.json").is_file()
    card = (final / "README.md").read_text()  # ours replaces the one PEFT writes
    assert front_matter(card)["library_name"] == "peft"
    assert "This PEFT adapter is an adapter for `tiny-model` (local)" in card and model_path not in section(
        card, "Training"
    )
    assert f'AutoPeftModelForCausalLM.from_pretrained("{final}")' in section(card, "How to load")
    assert "- PEFT: " in card


# ---------------------------------------------------------------------------------------------------------------
# The pure builder
# ---------------------------------------------------------------------------------------------------------------
PAPER = {"title": "A Paper", "id": "2401.00001", "citation": "@article{key2024,\n  title = {A Paper},\n}"}


def card_of(**overrides):
    kwargs = dict(
        model_name="toy",
        method="M",
        description="Line one.\nLine two.",
        load_path="outputs/toy",
        paper=PAPER,
    )
    kwargs.update(overrides)
    return build_model_card(**kwargs)


def test_front_matter_is_yaml_and_keeps_local_paths_out(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org" / "local").mkdir(parents=True)
    datasets = ["openai/gsm8k", "org/local", "/data/train.jsonl", "task:gsm8k", "healtrl-toy/add", "gsm8k"]
    card = card_of(base_model="Qwen/Qwen3-0.6B", datasets=datasets, tags=["trl", "healtrl", "m", "trl"])
    meta = front_matter(card)
    assert meta == {
        "base_model": "Qwen/Qwen3-0.6B",
        "datasets": ["openai/gsm8k"],
        "library_name": "transformers",
        "model_name": "toy",
        "pipeline_tag": "text-generation",
        "tags": ["trl", "healtrl", "m"],
    }
    from huggingface_hub import ModelCard

    assert ModelCard(card).data.base_model == "Qwen/Qwen3-0.6B"  # the Hub's own parser reads it

    shown = {  # a local path by its last component (issue #41 item 9); healtrl's names as given
        "org/local": "local",
        str(tmp_path): tmp_path.name,
        "./org/local": "local",
        "../x/y": "y",
        "healtrl-toy/qwen2-add": "healtrl-toy/qwen2-add",
        "healtrl-offline/a": "healtrl-offline/a",
    }
    for local, name in shown.items():
        card = card_of(base_model=local)
        assert "base_model" not in front_matter(card), local
        assert f"- Base model: `{name}`" in card, local
        assert str(tmp_path) not in card, local
    assert not is_hub_id(None) and not is_hub_id("task:gsm8k") and not is_hub_id("gpt2")
    assert is_hub_id("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_builder_sections_and_values():
    history = [
        {"step": 1, "entropy": 0.9, "reward": 0.1, "m/coef": 0.0},
        {"step": 1, "eval/toy-add/avg@4": 0.25, "eval/toy-add/pass@4": 0.5},  # an older evaluation
        {"step": 2, "entropy": 0.5, "reward": 0.4, "m/coef": 0.125},
        {"step": 2, "eval/toy-add/avg@4": 0.375, "eval/toy-add/pass@1": 0.375, "eval/toy-add/pass@4": 0.75},
        {"step": 2, "eval/rg/basic_arithmetic/avg@4": 1.0, "eval/rg/basic_arithmetic/mean_response_length": 3.5},
        {"step": 2, "train_runtime": 1.0},
    ]
    card = card_of(
        base_model="Qwen/Qwen3-0.6B",
        method_hyperparameters={"tau": 2.83e-06, "mode": "a|b", "none": None, "flag": True, "list": [1, 0.5]},
        training_hyperparameters={"learning_rate": 1e-06},
        reward_functions={"acc": 1.0, "eda": 0.5},
        log_history=history,
        summary_keys=["m/coef", "never/logged"],
        curves_image="curves.png",
    )
    assert "Line one.\nLine two." in section(card, "Method: M")
    assert "Paper: [*A Paper*](https://arxiv.org/abs/2401.00001) (arXiv:2401.00001)." in card
    assert "Built on GRPO: [*DeepSeekMath" in card
    assert "| `tau` | `2.83e-06` |" in card and "| `mode` | `a\\|b` |" in card
    assert "| `none` | `None` |" in card and "| `flag` | `True` |" in card and "| `list` | `[1, 0.5]` |" in card
    assert "| `learning_rate` | `1e-06` |" in card
    assert "- Rewards: `acc` (weight 1.0), `eda` (weight 0.5)" in card
    assert "| entropy | 0.9 (step 1) | 0.5 (step 2) |" in card and "| reward | 0.1 (step 1) | 0.4 (step 2) |" in card
    assert "| m/coef | 0 (step 1) | 0.125 (step 2) |" in card and "never/logged" not in card

    evaluation = section(card, "Evaluation")
    assert eval_results_from_log_history(history) == {
        "toy-add": {"step": 2, "metrics": {"avg@4": 0.375, "pass@1": 0.375, "pass@4": 0.75}},
        "rg/basic_arithmetic": {"step": 2, "metrics": {"avg@4": 1.0, "mean_response_length": 3.5}},
    }
    assert "| task | step | avg@4 (%) | pass@1 (%) | pass@4 (%) | mean length |" in evaluation
    assert "| `toy-add` | 2 | 37.5 | 37.5 | 75.0 | — |" in evaluation
    assert "| `rg/basic_arithmetic` | 2 | 100.0 | — | — | 3.5 |" in evaluation
    assert card.index("## Evaluation") < card.index("## How to load") < card.index("## Citation")

    bare = card_of()
    assert "## Evaluation" not in bare and "![curves]" not in bare and "### Entropy and reward" not in bare
    assert "![token entropy]" not in bare and "![token entropy]" not in card
    # The token-entropy summary of the training-time views, next to the curves (issue #18 item 5)
    both = card_of(log_history=history, curves_image="curves.png", entropy_image="inspect_summary.png")
    entropy = section(both, "Training")
    assert entropy.index("![curves](curves.png)") < entropy.index("![token entropy](inspect_summary.png)")
    alone = card_of(entropy_image="inspect_summary.png")
    assert "### Entropy and reward" in alone and "![token entropy](inspect_summary.png)" in alone
    assert "- Base model: not recorded" in bare and "- Datasets: not recorded" in bare
    assert 'AutoModelForCausalLM.from_pretrained("outputs/toy")' in bare
    # the method is GRPO itself: cited once
    grpo = card_of(
        paper={**PAPER, "title": "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open Language Models"}
    )
    assert "Built on GRPO" not in grpo and grpo.count("```bibtex") == 3

    peft = card_of(is_peft=True, base_model="Qwen/Qwen3-0.6B")
    assert front_matter(peft)["library_name"] == "peft"
    assert 'AutoPeftModelForCausalLM.from_pretrained("outputs/toy")' in peft
    assert "AutoModelForCausalLM.from_pretrained" not in peft


def test_results_json_of_healtrl_eval(tmp_path):
    settings = SamplingSettings(k=4, temperature=0.6, max_new_tokens=8)
    task = TaskResult(
        task="toy-add",
        split="test",
        reward="toy",
        threshold=1.0,
        k=4,
        num_problems=2,
        correct=[1, 4],  # avg@4 = 5/8
        pass_at={1: 0.625, 2: 0.75, 4: 1.0},
        mean_response_length=3.5,
        truncated_fraction=0.0,
        mean_reward=0.625,
    )
    EvalResults(model="outputs/toy", backend="transformers", settings=settings, tasks={"toy-add": task}).write(tmp_path)
    results = read_eval_results(tmp_path)
    card = card_of(eval_results=results)
    evaluation = section(card, "Evaluation")
    assert "`healtrl eval` (results.json; k=4, temperature=0.6, top_p=1.0, max_new_tokens=8)" in evaluation
    assert "| task | split | problems | avg@4 (%) | pass@1 (%) | pass@2 (%) | pass@4 (%) | mean length |" in evaluation
    assert "| `toy-add` | test | 2 | 62.5 | 62.5 | 75.0 | 100.0 | 3.5 |" in evaluation

    assert read_eval_results(tmp_path / "nothing-here") is None
    (tmp_path / "results.json").write_text("{not json")
    with pytest.raises(ValueError, match="results.json is not valid JSON"):
        read_eval_results(tmp_path)
    (tmp_path / "results.json").write_text(json.dumps({"tasks": {"toy-add": {"avg@4": 0.5}}}))
    with pytest.raises(ValueError, match="no `tasks` mapping"):
        read_eval_results(tmp_path / "results.json")


def test_results_json_next_to_saved_model(tmp_path):
    trainer = make_trainer(CASES["grpo"], tmp_path / "run", max_steps=1)
    final = tmp_path / "final"
    final.mkdir()
    settings = SamplingSettings(k=2, max_new_tokens=4)
    task = TaskResult("toy-add", "test", "toy", 1.0, 2, 1, [1], {1: 0.5, 2: 1.0}, 4.0, 1.0, 0.5)
    EvalResults(model=str(final), backend="transformers", settings=settings, tasks={"toy-add": task}).write(final)
    trainer.save_model(str(final))
    card = (final / "README.md").read_text()
    assert "| `toy-add` | test | 1 | 50.0 | 50.0 | 100.0 | 4.0 |" in section(card, "Evaluation")


def test_bad_builder_input_is_named():
    with pytest.raises(ValueError, match="`model_name`"):
        card_of(model_name="")
    with pytest.raises(ValueError, match="`paper`"):
        card_of(paper={"title": "T"})
    with pytest.raises(ValueError, match="`datasets`"):
        card_of(datasets="openai/gsm8k")
    assert format_value(0.1 + 0.2) == "`0.30000000000000004`"  # exact, not rounded


def test_citations_agree_with_citation_cff():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert f"{{{{{cff['title']}}}}}" in HEALTRL_CITATION
    assert f"version = {{{cff['version']}}}" in HEALTRL_CITATION and cff["license"] in HEALTRL_CITATION
    assert cff["authors"][0]["name"] in HEALTRL_CITATION
    titles = {ref["title"] for ref in cff["references"]}
    identifiers = {ident["value"] for ref in cff["references"] for ident in ref.get("identifiers", [])}
    for cls in (HEALTrainer, AERTrainer, PosAdvTrainer, OPEFOTrainer):
        assert cls._paper["title"] in titles, cls.__name__
        assert "{{" + cls._paper["title"] + "}}" in cls._paper["citation"]
        # the same arXiv id in the card's link, its BibTeX and CITATION.cff
        assert f"arXiv:{cls._paper['id']}" in identifiers and f"arXiv:{cls._paper['id']}" in cls._paper["citation"]
    # every card field names a config field (a typo would fail at save time)
    for case in CASES.values():
        config_fields = set(case["config"].__dataclass_fields__)
        assert set(case["cls"]._card_method_fields) <= config_fields, case["cls"].__name__
        for variant in case["cls"]._card_variants.values():
            assert set(variant.get("fields", [])) <= config_fields


def test_model_card_datasets_must_be_a_list(tmp_path):
    trainer = make_trainer(CASES["grpo"], tmp_path / "run", max_steps=1)
    trainer.model_card_datasets = "openai/gsm8k"
    with pytest.raises(TypeError, match=r"model_card_datasets must be a list"):
        trainer.create_model_card()
