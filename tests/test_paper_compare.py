"""Your run vs the paper: `paper_results` / `paper_protocol` (healtrl.recipes) and the comparison table `healtrl eval`
writes, on toy runs whose "paper" numbers the tests make up."""

from __future__ import annotations

import json

import pytest
import torch
import yaml

from healtrl.cli import main
from healtrl.recipes.comparison import compare_with_paper, render_comparison
from healtrl.recipes.recipe import PaperProtocol, parse_paper_protocol, parse_paper_results


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# AER Table 1, Qwen3-4B-Base, "w/ AER (Ours)": the schema of a real recipe.
AER_PROTOCOL = {"k": 32, "temperature": None, "top_p": None, "max_new_tokens": 8192, "source": "AER App. A"}
AER_RESULTS = [
    {"benchmark": "aime25", "metric": "pass@1", "value": 22.1, "table": "AER Table 1, Qwen3-4B-Base, w/ AER"},
    {"benchmark": "aime25", "metric": "pass@32", "value": 48.9, "table": "AER Table 1, Qwen3-4B-Base, w/ AER"},
]


def test_paper_results_take_k_from_the_protocol_or_the_metric():
    protocol = parse_paper_protocol(AER_PROTOCOL)
    results = parse_paper_results(AER_RESULTS, protocol)
    assert [(r.benchmark, r.label, r.k, r.value) for r in results] == [
        ("aime25", "pass@1", 32, 22.1),
        ("aime25", "pass@32", 32, 48.9),
    ]
    only_metric = parse_paper_results([{"benchmark": "aime24", "metric": "avg@32", "value": 27.7}])
    assert only_metric[0].k == 32 and only_metric[0].label == "avg@32"


@pytest.mark.parametrize(
    "entry, message",
    [
        ({"benchmark": "aime25", "metric": "pass@1", "k": 32, "value": 0.221}, None),  # a fraction is a valid percent
        ({"benchmark": "aime25", "metric": "pass@1", "k": 32, "value": 221}, "paper_results[0].value must be"),
        ({"benchmark": "aime", "metric": "pass@1", "k": 32, "value": 22.1}, "paper_results[0].benchmark: Unknown task"),
        ({"benchmark": "aime25", "metric": "pass@k", "value": 22.1}, "paper_results[0] has metric 'pass@k' but no k"),
        ({"benchmark": "aime25", "metric": "pass@64", "k": 32, "value": 22.1}, "needs at least 64 samples"),
        ({"benchmark": "aime25", "metric": "pass@1", "k": 32, "valu": 22.1}, "(did you mean 'value'?)"),
    ],
)
def test_paper_result_errors_name_the_entry(entry, message):
    if message is None:
        assert parse_paper_results([entry])[0].value == 0.221
        return
    with pytest.raises(ValueError) as info:
        parse_paper_results([entry])
    assert message in str(info.value)


def test_repeated_numbers_and_bad_protocol_are_rejected():
    with pytest.raises(ValueError, match=r"paper_results\[1\] repeats pass@1 on aime25"):
        parse_paper_results([AER_RESULTS[0], AER_RESULTS[0]], AER_PROTOCOL)
    with pytest.raises(ValueError, match="paper_protocol.top_p must be a number in"):
        parse_paper_protocol({"top_p": 1.5})
    with pytest.raises(ValueError, match="paper_protocol has unknown key"):
        parse_paper_protocol({"temp": 1.0})


def results_json(tasks: dict, k: int, temperature=1.0, top_p=1.0, max_new_tokens=8192) -> dict:
    """What `healtrl eval` writes (results.json) for tasks given as {task: per-problem correct counts}."""
    settings = {"k": k, "temperature": temperature, "top_p": top_p, "top_k": 0, "max_new_tokens": max_new_tokens}
    return {
        "model": "m",
        "settings": settings,
        "tasks": {name: {"k": k, "correct": correct, "num_problems": len(correct)} for name, correct in tasks.items()},
    }


def test_comparison_rows_compute_yours_and_flag_every_protocol_difference():
    protocol = PaperProtocol(k=4, temperature=1.0, top_p=0.7, max_new_tokens=None)
    paper = parse_paper_results(
        [
            {"benchmark": "aime24", "metric": "avg@k", "value": 40.0, "table": "T1"},
            {"benchmark": "aime25", "metric": "pass@2", "value": 50.0, "table": "T1"},
            {"benchmark": "aime25", "metric": "pass@8", "k": 8, "value": 70.0, "table": "T1"},
            {"benchmark": "amc23", "metric": "avg@k", "value": 60.0, "table": "T2"},
        ],
        protocol,
    )
    mine = results_json({"aime24": [1, 2, 0, 3], "aime25": [0, 4, 1, 0]}, k=4, top_p=0.7)
    rows = compare_with_paper(paper, protocol, [mine])
    by = {(r["benchmark"], r["metric"]): r for r in rows}
    aime24 = by[("aime24", "avg@4")]
    assert aime24["yours"] == pytest.approx(100 * 6 / 16) and aime24["difference"] == pytest.approx(37.5 - 40.0)
    assert aime24["mismatches"] == ["max_new_tokens not stated by the paper"]
    # pass@2 with k=4: 1 - C(4-c, 2)/C(4, 2) per problem = 0, 1, 0.5, 0
    assert by[("aime25", "pass@2")]["yours"] == pytest.approx(100 * 1.5 / 4)
    too_few = by[("aime25", "pass@8")]
    assert too_few["yours"] is None and too_few["difference"] is None
    assert "k 4 < 8: pass@8 cannot be estimated" in too_few["mismatches"] and "k 4 vs 8" in too_few["mismatches"]
    assert by[("amc23", "avg@4")]["mismatches"] == ["not evaluated"]

    hot = results_json({"aime24": [1, 2, 0, 3]}, k=2, temperature=0.6, top_p=1.0)
    flags = compare_with_paper(paper[:1], protocol, [hot])[0]["mismatches"]
    assert flags == ["k 2 vs 4", "temperature 0.6 vs 1.0", "top_p 1.0 vs 0.7", "max_new_tokens not stated by the paper"]

    table = render_comparison(rows, protocol, [mine], title="Toy vs made-up paper")
    head, body = table.split("| benchmark |")
    assert "- Paper protocol: k=4, 8, temperature=1, top_p=0.7, max_new_tokens=not stated" in head
    assert "- Your protocol: k=4, temperature=1, top_p=0.7, max_new_tokens=8192" in head
    assert "| aime24 | avg@4 | 37.5 | 40.0 | -2.5 | ⚠ max_new_tokens not stated by the paper | T1 |" in body
    assert "| amc23 | avg@4 | — | 60.0 | — | ⚠ not evaluated | T2 |" in body


def test_comparison_without_any_difference_says_same():
    protocol = PaperProtocol(k=2, temperature=1.0, top_p=1.0, max_new_tokens=8192)
    paper = parse_paper_results([{"benchmark": "aime24", "metric": "pass@2", "value": 50.0, "table": "T9"}], protocol)
    rows = compare_with_paper(paper, protocol, [results_json({"aime24": [2, 0]}, k=2)])
    table = render_comparison(rows, protocol, [results_json({"aime24": [2, 0]}, k=2)])
    assert "- Paper's numbers: T9" in table
    assert "| aime24 | pass@2 | 50.0 | 50.0 | +0.0 | same |" in table


# ----------------------------------------------------------------------------------------------------------------
# healtrl eval on a toy run whose recipe carries made-up "paper" numbers
# ----------------------------------------------------------------------------------------------------------------
PAPER = {
    "paper_protocol": {"k": 2, "temperature": 1.0, "top_p": None, "max_new_tokens": 4, "source": "made-up paper §1"},
    "paper_results": [
        {"benchmark": "toy-add", "metric": "avg@k", "value": 33.3, "table": "made-up Table 1"},
        {"benchmark": "toy-add", "metric": "pass@2", "value": 44.4, "table": "made-up Table 1"},
    ],
}


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    from healtrl.toy import load_toy_model

    run = tmp_path_factory.mktemp("run")
    model, tokenizer = load_toy_model("healtrl-toy/qwen2-add")
    for folder in (run, run / "checkpoint-8"):
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    config = {"trainer": "grpo", "model_name_or_path": "healtrl-toy/qwen2-add", "dataset_name": "healtrl-toy/add",
              "dataset_seed": 0, "reward_funcs": ["toy"], "max_completion_length": 4, **PAPER}  # fmt: skip
    (run / "config.yaml").write_text(yaml.safe_dump(config))
    return run


def test_healtrl_eval_on_a_run_writes_the_comparison(toy_run, tmp_path, capsys):
    out = tmp_path / "eval"
    assert main(["eval", "--model", str(toy_run / "checkpoint-8"), "--output_dir", str(out), "--no_progress"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert list(results["tasks"]) == ["toy-add"]  # the paper's benchmarks
    assert results["settings"]["k"] == 2 and results["settings"]["max_new_tokens"] == 4  # the paper's protocol
    correct = results["tasks"]["toy-add"]["correct"]
    avg = 100 * sum(correct) / (2 * len(correct))
    pass2 = 100 * sum(c > 0 for c in correct) / len(correct)
    table = (out / "paper_comparison.md").read_text()
    assert "- Paper protocol: k=2, temperature=1, top_p=not stated, max_new_tokens=4 (made-up paper §1)" in table
    assert "- Your protocol: k=2, temperature=1, top_p=1, max_new_tokens=4" in table
    assert "- Paper's numbers: made-up Table 1" in table
    assert f"| toy-add | avg@2 | {avg:.1f} | 33.3 | {avg - 33.3:+.1f} | ⚠ top_p not stated by the paper |" in table
    assert f"| toy-add | pass@2 | {pass2:.1f} | 44.4 | {pass2 - 44.4:+.1f} |" in table
    saved = json.loads((out / "paper_comparison.json").read_text())
    assert saved["rows"][0]["difference"] == pytest.approx(avg - 33.3)
    assert "paper_comparison.md" in capsys.readouterr().out

    # Explicit flags win over the paper's protocol, and the table flags the differences.
    out2 = tmp_path / "eval2"
    args = ["--model", str(toy_run), "--tasks", "toy-add", "--k", "1", "--temperature", "0", "--output_dir", str(out2)]
    assert main(["eval", *args, "--no_progress"]) == 0
    table = (out2 / "paper_comparison.md").read_text()
    assert "k 1 < 2: pass@2 cannot be estimated" in table and "k 1 vs 2; temperature 0.0 vs 1.0" in table


def test_compare_paper_from_earlier_results(toy_run, tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        yaml.safe_dump(
            {
                "paper_protocol": {"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 4},
                "paper_results": [
                    {"benchmark": "toy-add", "metric": "avg@4", "value": 20.0, "table": "made-up T2"},
                    {"benchmark": "toy-compare", "metric": "avg@1", "value": 10.0, "table": "made-up T2"},
                ],
            }
        )
    )
    for task, k in (("toy-add", "4"), ("toy-compare", "1")):
        args = ["--model", str(toy_run), "--tasks", task, "--k", k, "--max_new_tokens", "4", "--num_samples", "6"]
        assert main(["eval", *args, "--output_dir", str(tmp_path / task), "--no_progress"]) == 0
    files = f"{tmp_path / 'toy-add' / 'results.json'},{tmp_path / 'toy-compare' / 'results.json'}"
    out = tmp_path / "both"
    assert main(["eval", "--compare-paper", str(recipe), "--results", files, "--output_dir", str(out)]) == 0
    table = (out / "paper_comparison.md").read_text()
    assert "| toy-add | avg@4 |" in table and "| toy-compare | avg@1 |" in table
    assert "not evaluated" not in table and table.count("| same |") == 2

    # Evaluating as the paper did with one command is refused when the paper's rows use several k: the error says how.
    capsys.readouterr()
    assert main(["eval", "--model", str(toy_run), "--compare_paper", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "use several k (1, 4)" in err and "`--tasks toy-compare --k 1`" in err and "--results" in err


def test_comparison_usage_errors(tmp_path, capsys):
    assert main(["eval", "--model", "healtrl-toy/qwen2-add"]) == 2
    assert "--tasks is required" in capsys.readouterr().err
    assert main(["eval", "--results", str(tmp_path / "missing.json")]) == 2
    assert "does not exist" in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"paper_results": [{"benchmark": "toy-add", "metric": "avg@k", "value": 5}]}))
    assert main(["eval", "--model", "healtrl-toy/qwen2-add", "--compare_paper", str(bad)]) == 2
    assert "bad.yaml: paper_results[0] has metric 'avg@k' but no k" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------------------------
# The paper's numbers belong to a model and training data (issue #27 item 2)
# ----------------------------------------------------------------------------------------------------------------
def test_paper_rows_are_selected_by_the_runs_model_and_data():
    from healtrl.recipes.comparison import PaperRowMismatch, select_paper_rows

    protocol = parse_paper_protocol({**AER_PROTOCOL, "model": "Qwen/Qwen3-4B-Base", "dataset": "task:deepscaler"})
    paper = parse_paper_results(
        [*AER_RESULTS, {**AER_RESULTS[0], "value": 31.4, "model": "Qwen/Qwen3-8B-Base", "table": "8B row"}], protocol
    )
    assert [(r.model, r.dataset) for r in paper] == [("Qwen/Qwen3-4B-Base", "task:deepscaler")] * 2 + [
        ("Qwen/Qwen3-8B-Base", "task:deepscaler")
    ]
    four = {"model": "Qwen/Qwen3-4B-Base", "dataset": "task:deepscaler"}
    assert [r.value for r in select_paper_rows(paper, four)] == [22.1, 48.9]
    assert [r.value for r in select_paper_rows(paper, {**four, "model": "Qwen/Qwen3-8B-Base"})] == [31.4]
    assert len(select_paper_rows(paper, None)) == 3  # not a run folder: nothing to check against
    other = {"model": "Qwen/Qwen3-4B-Base", "dataset": "task:webinstruct-physics"}
    with pytest.raises(PaperRowMismatch) as info:
        select_paper_rows(paper, other)
    message = str(info.value)
    assert "training data task:webinstruct-physics" in message and "training data task:deepscaler" in message
    assert "--compare_anyway" in message
    forced = select_paper_rows(paper, other, allow_mismatch=True)
    rows = compare_with_paper(forced, protocol, [results_json({"aime25": [1, 0]}, k=32)], run=other)
    assert all("dataset task:webinstruct-physics vs the paper's task:deepscaler" in r["mismatches"] for r in rows)
    # the same number for two models is two entries, not a repeat
    with pytest.raises(ValueError, match="repeats pass@1 on aime25"):
        parse_paper_results([AER_RESULTS[0], {**AER_RESULTS[0], "value": 1.0}], protocol)


def test_healtrl_eval_refuses_another_models_numbers_unless_asked(toy_run, tmp_path, capsys):
    recipe = tmp_path / "recipe.yaml"
    paper = {**PAPER, "paper_protocol": {**PAPER["paper_protocol"], "model": "Qwen/Qwen3-4B-Base"}}
    recipe.write_text(yaml.safe_dump(paper))
    args = ["eval", "--model", str(toy_run), "--compare_paper", str(recipe), "--num_samples", "4", "--no_progress"]
    assert main([*args, "--output_dir", str(tmp_path / "refused")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "the run's model healtrl-toy/qwen2-add and training data healtrl-toy/add" in err
    assert "model Qwen/Qwen3-4B-Base, training data not stated" in err
    assert not (tmp_path / "refused").exists()  # refused before evaluating
    assert main([*args, "--output_dir", str(tmp_path / "forced"), "--compare_anyway"]) == 0
    table = (tmp_path / "forced" / "paper_comparison.md").read_text()
    assert "- Paper's model and training data: Qwen/Qwen3-4B-Base, not stated" in table
    assert "- Yours: healtrl-toy/qwen2-add, healtrl-toy/add" in table
    assert table.count("model healtrl-toy/qwen2-add vs the paper's Qwen/Qwen3-4B-Base") == 2


def test_every_promised_model_row_is_in_the_configs():
    """Headers that promise another model's row by an override carry that row's numbers, tied to that model."""
    from pathlib import Path

    configs = Path(__file__).resolve().parent.parent / "configs"
    for path in sorted(configs.glob("*.yaml")):
        text = path.read_text()
        config = yaml.safe_load(text)
        if "paper_results" not in config:
            continue
        protocol = parse_paper_protocol(config["paper_protocol"])
        assert protocol.model == config["model_name_or_path"] and protocol.dataset == config["dataset_name"], path.name
        models = ("Qwen/Qwen3-8B-Base", "Qwen/Qwen3-4B-Base", "meta-llama/Llama-3.2-3B-Instruct")
        promised = {m for m in models if m in text.split("\ntrainer:")[0]}  # the header names the model
        promised.discard(config["model_name_or_path"])
        rows = {r.model for r in parse_paper_results(config["paper_results"], protocol)}
        assert promised <= rows, f"{path.name} promises {promised - rows} but has no numbers for it"


# ----------------------------------------------------------------------------------------------------------------
# Settings the paper does not state: null, with our choice in `ours` (issue #27 item 5)
# ----------------------------------------------------------------------------------------------------------------
def test_ours_holds_only_what_the_paper_leaves_unstated():
    protocol = parse_paper_protocol({"k": 4, "max_new_tokens": None, "ours": {"max_new_tokens": 3000}})
    assert protocol.value("max_new_tokens") == 3000 and protocol.value("temperature") is None
    with pytest.raises(ValueError, match="ours.max_new_tokens is set but the paper states max_new_tokens"):
        parse_paper_protocol({"max_new_tokens": 4096, "ours": {"max_new_tokens": 3000}})
    with pytest.raises(ValueError, match="ours.seed: ours holds only"):
        parse_paper_protocol({"ours": {"seed": 1}})
    with pytest.raises(ValueError, match="top_p must be a number in"):
        parse_paper_protocol({"ours": {"top_p": 2.0}})
    paper = parse_paper_results([{"benchmark": "aime24", "metric": "avg@k", "value": 40.0, "table": "T"}], protocol)
    mine = results_json({"aime24": [1, 2, 0, 3]}, k=4, max_new_tokens=3000)
    rows = compare_with_paper(paper, protocol, [mine])
    assert "max_new_tokens not stated by the paper (ours: 3000)" in rows[0]["mismatches"]  # flagged, never "same"
    table = render_comparison(rows, protocol, [mine])
    assert (
        "- Paper protocol: k=4, temperature=not stated, top_p=not stated, max_new_tokens=not stated (ours: 3000)"
        in (table)
    )


def test_healtrl_eval_decodes_with_ours_where_the_paper_is_silent(toy_run, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    protocol = {**PAPER["paper_protocol"], "max_new_tokens": None, "ours": {"max_new_tokens": 3}}
    recipe.write_text(yaml.safe_dump({**PAPER, "paper_protocol": protocol}))
    out = tmp_path / "eval"
    args = ["eval", "--model", str(toy_run), "--compare_paper", str(recipe), "--num_samples", "2", "--no_progress"]
    assert main([*args, "--output_dir", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["settings"]["max_new_tokens"] == 3
    assert "max_new_tokens not stated by the paper (ours: 3)" in (out / "paper_comparison.md").read_text()


def test_ablation_rows_are_selected_by_their_settings():
    """OPEFO's Table 2 ablations are overrides of its config: each is compared only with its own numbers."""
    from pathlib import Path

    from healtrl.recipes.comparison import PaperRowMismatch, select_paper_rows

    config = yaml.safe_load((Path(__file__).resolve().parent.parent / "configs/opefo_qwen25_math_7b.yaml").read_text())
    protocol = parse_paper_protocol(config["paper_protocol"])
    paper = parse_paper_results(config["paper_results"], protocol)
    run = {"model": config["model_name_or_path"], "dataset": config["dataset_name"], "settings": config}
    assert {r.table for r in select_paper_rows(paper, run)} == {"OPEFO Table 1, Qwen2.5-Math-7B, OPEFO"}
    static = {**run, "settings": {**config, "lambda_mode": "static"}}
    assert {r.table for r in select_paper_rows(paper, static)} == {"OPEFO Table 2, Static Scaling"}
    plus = {**run, "settings": {**config, "balance_sides": "pos"}}
    assert [r.value for r in select_paper_rows(paper, plus)][:2] == [32.8, 18.2]
    with pytest.raises(PaperRowMismatch, match="static_lambda 0.002 vs the paper's 0.001"):
        select_paper_rows(paper, {**run, "settings": {**config, "lambda_mode": "static", "static_lambda": 0.002}})
    with pytest.raises(ValueError, match=r"paper_protocol.settings.lambda_mode must be a single value"):
        parse_paper_protocol({"settings": {"lambda_mode": ["static"]}})


def test_posadv_clipping_rows_follow_the_clip_range(capsys):
    """PosAdv's Clip-Lower / Clip-Tighter / Clip-Free rows are overrides of its Clip-Higher config: the dry run counts
    the numbers of the overridden clip range, and the selection returns that row only."""
    from pathlib import Path

    from healtrl.cli import train_main
    from healtrl.recipes.comparison import select_paper_rows

    path = Path(__file__).resolve().parent.parent / "configs/posadv_baseline_clip_higher_qwen25_math_7b_dapo.yaml"
    config = yaml.safe_load(path.read_text())
    paper = parse_paper_results(config["paper_results"], parse_paper_protocol(config["paper_protocol"]))
    run = {"model": config["model_name_or_path"], "dataset": config["dataset_name"], "settings": config}
    tighter = {**run, "settings": {**config, "epsilon": 0.12, "epsilon_high": 0.2}}
    assert {r.table.split(", ")[-1] for r in select_paper_rows(paper, tighter)} == {"+ Clip-Tighter"}
    assert {r.table.split(", ")[-1] for r in select_paper_rows(paper, run)} == {"+ Clip-Higher"}
    argv = ["--config", str(path), "--dry_run", "--num_processes", "8", "--epsilon", "1e4", "--epsilon_high", "1e4"]
    assert train_main(argv) == 0
    assert "10 numbers for this model, training data and settings" in " ".join(capsys.readouterr().out.split())
