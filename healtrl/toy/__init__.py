"""An offline toy world: a character tokenizer, tiny LMs, verifiable tasks and warmed-up models, all on a CPU in seconds.

    from trl import GRPOTrainer

    from healtrl.toy import load_toy_model, make_dataset, toy_grpo_config, toy_reward

    model, tokenizer = load_toy_model("healtrl-toy/qwen2-add")  # built and cached on first use (~10 s)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=toy_reward,
        args=toy_grpo_config("out", steps=100),
        train_dataset=make_dataset("add", 1600),
        processing_class=tokenizer,
    )
    trainer.train()

`reproduce_entropy_collapse()` runs the whole entropy-collapse experiment in one call.

What the package may import: `healtrl.functional`, `healtrl.utils` and its own modules, never the trainers, the
evaluation or the command line (`pyproject.toml`'s import contract).
"""

from .cache import (
    default_cache_dir,
    is_toy_model_name,
    load_toy_model,
    parse_toy_model_name,
    toy_build_overrides,
    toy_model_info,
    toy_model_name,
    toy_model_path,
)
from .collapse import history_points, reproduce_entropy_collapse, toy_grpo_config
from .model import ARCHITECTURES, build_model
from .supervised import sample_completions, sampled_accuracy, warmup
from .tasks import FAMILIES, TaskFamily, completion_text, get_family, make_dataset, make_split, toy_reward
from .tokenizer import (
    ASSISTANT_TOKEN,
    CHARACTERS,
    CHAT_TEMPLATE,
    EOS_TOKEN,
    PAD_TOKEN,
    SPECIAL_TOKENS,
    SYSTEM_TOKEN,
    UNK_TOKEN,
    USER_TOKEN,
    build_tokenizer,
    save_tokenizer,
)

__all__ = [
    "ARCHITECTURES",
    "ASSISTANT_TOKEN",
    "CHARACTERS",
    "CHAT_TEMPLATE",
    "EOS_TOKEN",
    "FAMILIES",
    "PAD_TOKEN",
    "SPECIAL_TOKENS",
    "SYSTEM_TOKEN",
    "UNK_TOKEN",
    "USER_TOKEN",
    "TaskFamily",
    "build_model",
    "build_tokenizer",
    "completion_text",
    "default_cache_dir",
    "get_family",
    "history_points",
    "is_toy_model_name",
    "load_toy_model",
    "make_dataset",
    "make_split",
    "parse_toy_model_name",
    "reproduce_entropy_collapse",
    "sample_completions",
    "sampled_accuracy",
    "save_tokenizer",
    "toy_grpo_config",
    "toy_build_overrides",
    "toy_model_info",
    "toy_model_name",
    "toy_model_path",
    "toy_reward",
    "warmup",
]
