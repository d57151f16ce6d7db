"""The reasoning world (issue #26 item 1): Countdown's verifier and solutions, the demonstrations, the reward's
dispatch to the verifier, the card's statistics, and a smoke run (item 6)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from healtrl.toy import countdown
from healtrl.toy.tasks import FAMILIES, held_out_indices, make_split, toy_reward


def _conv(question):
    return [{"role": "user", "content": question}]


def test_every_problem_has_several_verified_solutions_and_wrong_paths_fail():
    rng = random.Random(0)
    problems = countdown.countdown_problems()
    assert len(problems) == countdown.COUNTDOWN_SIZE == FAMILIES["countdown"].size
    assert len({(tuple(sorted(n)), t) for n, t in problems}) == len(problems)  # distinct
    assert {len(n) for n, _ in problems} == {3, 4}
    for index in rng.sample(range(len(problems)), 60):
        numbers, target = problems[index]
        question, reference = countdown.countdown_problem(index)
        assert countdown.parse_countdown(question) == (list(numbers), target)
        paths = countdown.solutions(numbers, target)
        assert len(paths) >= 2 and reference in paths and target >= 10 and target not in numbers
        assert all(countdown.verify_countdown(question, p) for p in paths)
        for _ in range(5):
            wrong = countdown.wrong_path(rng, numbers, target)
            assert not countdown.verify_countdown(question, wrong), wrong
    # Every world path (`_paths`) the verifier accepts is one `solutions` lists: enumerate all paths of one problem and compare.
    numbers, target = problems[0]
    accepted = {
        ",".join(s)
        for v, s in countdown._paths(tuple(sorted(numbers)))
        if countdown.check_countdown(numbers, target, ",".join(s))
    }
    assert accepted == set(countdown.solutions(numbers, target))


@pytest.mark.parametrize(
    "completion, ok",
    [
        ("11+2=13,12-5=7,13+7=20", True),
        (" 11+2=13, 12-5=7, 13+7=20 ", True),  # whitespace around steps is tolerated
        ("12+11=23,23-5=18,18+2=20", True),
        ("12+11=23,23-5=18,18+3=21", False),  # 3 is not available
        ("12+11=23,23-5=18,18+2=21", False),  # wrong arithmetic
        ("12+11=23,23+5=28,28-2=26", False),  # off target
        ("11+2=13,13+7=20", False),  # 7 is never made; 5 and 12 unused
        ("12+5=17,17+2=19,19+11=30,30-10=20", False),  # 10 is not available
        ("11+2=13,12-5=7,13+7=20,20-0=20", False),  # 0 is not available
        ("11+11=22,22-2=20", False),  # 11 used twice
        ("11+2=13,12-5=7,7+13=20", True),  # operands in either order
        ("11*2=22,22-12=10,10+5=15", False),  # only + and -
        ("11+2=13,,12-5=7,13+7=20", False),  # empty step
        ("", False),
        ("20", False),
        ("1" * 10_000, False),
    ],
)
def test_verifier_cases(completion, ok):
    assert countdown.verify_countdown("2,5,11,12>20", completion) is ok


def test_verifier_refuses_what_is_not_a_countdown_question():
    assert countdown.parse_countdown("3+5=") is None
    assert countdown.parse_countdown("2,5>20") is None  # two numbers
    assert not countdown.verify_countdown("3+5=", "8")
    assert not countdown.verify_countdown(None, "8")


def test_toy_reward_verifies_countdown_rows_and_exact_matches_the_others():
    question, reference = countdown.countdown_problem(3)
    numbers, target = countdown.countdown_problems()[3]
    other = [p for p in countdown.solutions(numbers, target) if p != reference][0]
    prompts = [_conv(question)] * 3 + [_conv("3+5+2")]
    completions = [reference, other, reference + ",1+1=2", "3+5=8,8+2=10"]
    answers = [reference] * 3 + ["3+5=8,8+2=10"]
    tasks = ["countdown"] * 3 + ["sumchain"]
    assert toy_reward(prompts=prompts, completions=completions, answer=answers, task=tasks) == [1.0, 1.0, 0.0, 1.0]
    # Without the task column a Countdown question is still verified (not exact-matched against one reference).
    assert toy_reward(prompts=prompts[:2], completions=completions[:2], answer=answers[:2]) == [1.0, 1.0]
    # Conversations and rendered prompts alike; a missing prompt scores 0 (nothing to verify against).
    rendered = f"<|user|>{question}<|assistant|>"
    assert toy_reward(
        prompts=[rendered], completions=[[{"role": "assistant", "content": other}]], task=["countdown"]
    ) == [1.0]
    assert toy_reward(completions=[other], answer=[reference], task=["countdown"]) == [0.0]


def test_registry_rows_are_verified_too():
    """Rows loaded through healtrl.tasks carry the registry name (`toy-countdown`): the verifier scores them, so any
    correct path counts (this held-out evaluation once exact-matched one reference path)."""
    from healtrl.tasks import load_task

    row = load_task("toy-countdown", split="test")[0]  # what healtrl.evaluation.evaluate scores
    numbers, target = countdown.parse_countdown(row["prompt"][-1]["content"])
    paths = countdown.solutions(numbers, target)
    assert len(paths) >= 2
    prompts = [row["prompt"]] * len(paths)
    scores = toy_reward(
        prompts=prompts, completions=paths, answer=[row["answer"]] * len(paths), task=[row["task"]] * len(paths)
    )
    assert row["task"] == "toy-countdown" and scores == [1.0] * len(paths)
    assert toy_reward(prompts=prompts[:1], completions=["1+1=2"], answer=[row["answer"]], task=[row["task"]]) == [0.0]


def test_held_out_indices_are_the_test_split():
    for family in ("countdown", "sumchain", "add"):
        test = make_split(family, 1, 20, seed=0)["test"]
        fam = FAMILIES[family]
        expected = {fam.problem(i)[0] for i in held_out_indices(family)}
        assert {p[0]["content"] for p in test["prompt"]} == expected


def test_demonstrations_avoid_held_out_problems_and_mix_correct_and_wrong():
    from healtrl.toy.world import demonstrations

    rows = demonstrations(n=1200, p_correct=0.4, seed=1)
    held_out = {FAMILIES[f].problem(i)[0] for f in ("countdown", "sumchain") for i in held_out_indices(f)}
    assert not held_out & {p[0]["content"] for p in rows["prompt"]}
    assert 850 < rows["task"].count("countdown") < 950  # general_share 0.25
    cd = [(p[0]["content"], a) for p, a, t in zip(rows["prompt"], rows["answer"], rows["task"]) if t == "countdown"]
    correct = sum(countdown.verify_countdown(q, a) for q, a in cd) / len(cd)
    assert 0.34 < correct < 0.46  # p_correct 0.4, ~900 draws
    assert len({a for q, a in cd if countdown.verify_countdown(q, a)}) > 100  # several paths, not one per problem
    sums = [(p[0]["content"], a) for p, a, t in zip(rows["prompt"], rows["answer"], rows["task"]) if t == "sumchain"]
    assert all(countdown.sum_chain([int(x) for x in q.split("+")]) == a for q, a in sums)


def test_pass_at_k_the_card_uses_is_unbiased():
    from healtrl.toy.world import pass_at_k  # healtrl.functional's estimator (Chen et al. 2021, eq. 1)

    assert pass_at_k(16, 0, 16) == 0.0 and pass_at_k(16, 1, 16) == 1.0
    assert pass_at_k(16, 4, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)  # 1 - C(3,2)/C(4,2)


def test_smoke_world_builds_and_trains_a_method(tmp_path):
    """Item 6: the world at a tiny size (built in the test), its statistics, and AER for two steps on it."""
    from transformers import PrinterCallback

    from healtrl import AERConfig, AERTrainer
    from healtrl.data import load_train_dataset
    from healtrl.toy import load_toy_model, toy_model_info
    from healtrl.toy.collapse import toy_grpo_config
    from healtrl.toy.world import MAX_COMPLETION_LENGTH, WORLD_MODEL, world_statistics

    build = dict(hidden_size=32, num_layers=1, num_heads=2, target_accuracy=0.9, max_steps=4, batch_size=8,
                 lr=1e-3, max_new_tokens=MAX_COMPLETION_LENGTH, demo_correct=0.4, demo_rows=64, eval_every=4,
                 probe_size=32)  # fmt: skip
    with pytest.warns(UserWarning, match="max_steps=4"):
        model, tokenizer = load_toy_model(WORLD_MODEL, cache_dir=tmp_path, **build)
    info = toy_model_info(model.config.name_or_path)
    assert info["spec"]["demo_correct"] == 0.4 and info["warmup"]["steps"] == 4
    assert [step for step, _ in info["warmup"]["history"]] == [0, 4]  # the probe before the first step and at the last
    rows = load_train_dataset("healtrl-toy/countdown", split="train", num_samples=4, seed=0)
    stats = world_statistics(model, tokenizer, rows, k=4, group=4)
    assert 0.0 <= stats["pass@1"] <= stats["pass@4"] <= 1.0
    assert sum(stats["entropy_bins"].values()) == pytest.approx(1.0)
    assert 1 <= stats["mean_length"] <= MAX_COMPLETION_LENGTH

    args = toy_grpo_config(str(tmp_path / "aer"), steps=2, config_cls=AERConfig, per_device_train_batch_size=8,
                           num_generations=4, max_completion_length=MAX_COMPLETION_LENGTH, entropy_flow_diagnostics=True)  # fmt: skip
    trainer = AERTrainer(
        model=model, reward_funcs=toy_reward, args=args, train_dataset=rows, processing_class=tokenizer
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "rewards/toy_reward/mean" in h]
    assert len(logged) == 2 and all("entropy_flow/net" in h and "aer/alpha" in h for h in logged)


def test_the_world_name_stands_for_its_build_and_plain_names_keep_theirs(tmp_path):
    from healtrl.toy.cache import PLAIN_BUILD, _folder_name, _spec, default_build, toy_model_path
    from healtrl.toy.world import WORLD_BUILD, WORLD_MODEL

    assert default_build(WORLD_MODEL) == {**PLAIN_BUILD, **WORLD_BUILD}
    assert default_build("healtrl-toy/qwen2-add+compare") == PLAIN_BUILD
    with pytest.raises(TypeError, match="hidden"):
        toy_model_path(WORLD_MODEL, tmp_path, hiden_size=64)
    # The plain models' cache key has no demonstration fields, so their folders did not move with the world's arrival.
    plain = {k: v for k, v in PLAIN_BUILD.items() if k not in ("demo_correct", "demo_rows", "eval_every")}
    assert "demo_correct" not in _spec("healtrl-toy/qwen2-add", **plain)
    assert _folder_name(_spec("healtrl-toy/qwen2-add", **plain)).startswith("toy-qwen2-add-")


def test_cache_keys_are_pinned_and_probe_size_enters_only_when_set(tmp_path, monkeypatch):
    """The cached world's folder (which the study's cached runs were trained from) and the plain toy's keep their
    names; `probe_size` joins the key only when given, reaches the warm-up, and must be a positive integer."""
    from healtrl.toy import cache
    from healtrl.toy.world import WORLD_MODEL

    built = []
    monkeypatch.setattr(cache, "_build", lambda spec, folder: built.append((spec, folder)))
    assert Path(cache.toy_model_path(WORLD_MODEL, tmp_path)).name == "toy-qwen2-countdown+sumchain-cf55668448a6"
    assert Path(cache.toy_model_path("healtrl-toy/qwen2-add", tmp_path)).name == "toy-qwen2-add-c7552c3096d9"
    assert all("probe_size" not in spec for spec, _ in built)
    small = Path(cache.toy_model_path(WORLD_MODEL, tmp_path, probe_size=64))
    assert small.name != "toy-qwen2-countdown+sumchain-cf55668448a6" and built[-1][0]["probe_size"] == 64
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="probe_size must be a positive integer"):
            cache.toy_model_path(WORLD_MODEL, tmp_path, probe_size=bad)


def test_world_text_survives_the_saved_tokenizer(tmp_path):
    """The world's prompts and answers encode the same through the toy tokenizer and through the tokenizer that
    `AutoTokenizer` reloads from a saved qwen2 toy folder (transformers 5 picks `Qwen2Tokenizer` there, which drops
    whitespace: the reason Countdown questions separate numbers with commas)."""
    from transformers import AutoTokenizer

    from healtrl.toy.model import build_model
    from healtrl.toy.tokenizer import build_tokenizer, save_tokenizer

    tokenizer = build_tokenizer()
    build_model("qwen2", hidden_size=16, num_layers=1, num_heads=2, tokenizer=tokenizer).save_pretrained(tmp_path)
    save_tokenizer(tokenizer, tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    texts = [t for i in range(0, 800, 40) for t in countdown.countdown_problem(i)]
    texts += [t for i in range(0, 800, 40) for t in countdown.sumchain_problem(i)]
    for text in texts:
        conv = [{"role": "user", "content": text}]
        ids = [t.apply_chat_template(conv, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
               for t in (tokenizer, reloaded)]  # fmt: skip
        assert ids[0] == ids[1], text
        assert reloaded.decode(tokenizer(text, add_special_tokens=False)["input_ids"]) == text
