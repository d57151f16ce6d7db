"""Tiny randomly initialised causal LMs (Qwen2, Qwen3, Llama) sized for the toy tokenizer."""

from __future__ import annotations

import torch
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
)

from .tokenizer import build_tokenizer

# arch name -> (config class, model class)
ARCHITECTURES: dict[str, tuple[type[PretrainedConfig], type[PreTrainedModel]]] = {
    "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    "qwen3": (Qwen3Config, Qwen3ForCausalLM),
    "llama": (LlamaConfig, LlamaForCausalLM),
}


def build_model(
    arch: str = "qwen2",
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    tokenizer: PreTrainedTokenizerBase | None = None,
    seed: int = 0,
    tie_word_embeddings: bool = True,
    intermediate_size: int | None = None,
    num_key_value_heads: int | None = None,
    max_position_embeddings: int = 256,
) -> PreTrainedModel:
    """Build a small randomly initialised causal LM whose vocabulary matches the toy tokenizer.

    Args:
        arch: "qwen2", "qwen3" or "llama".
        hidden_size: Width of the residual stream; must be divisible by `num_heads`.
        num_layers: Number of transformer blocks.
        num_heads: Attention heads (head dim = `hidden_size // num_heads`).
        tokenizer: Tokenizer whose `len()` sets the vocabulary size and whose pad/eos ids go into the configs;
            defaults to `build_tokenizer()`.
        seed: Seed of the weight initialisation (the global RNG is restored afterwards).
        tie_word_embeddings: Share the input embedding and the LM head.
        intermediate_size: MLP width; defaults to `4 * hidden_size`.
        num_key_value_heads: KV heads for grouped-query attention; defaults to `num_heads` (plain multi-head).
        max_position_embeddings: Longest sequence the rotary embedding is configured for.

    Returns:
        The model in fp32 and eval mode, with `config` and `generation_config` carrying the tokenizer's `pad_token_id`
        and `eos_token_id` (`<|end|>`, the generation stop).
    """
    if arch not in ARCHITECTURES:
        raise ValueError(f"Unknown toy architecture {arch!r}; choose one of {sorted(ARCHITECTURES)}.")
    if hidden_size % num_heads:
        raise ValueError(f"hidden_size={hidden_size} is not divisible by num_heads={num_heads}.")
    tokenizer = tokenizer if tokenizer is not None else build_tokenizer()
    config_cls, model_cls = ARCHITECTURES[arch]
    special_ids = {
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": tokenizer.bos_token_id,
    }
    config = config_cls(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size or 4 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_key_value_heads or num_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=tie_word_embeddings,
        dtype="float32",
        **special_ids,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_cls(config)
    model.to(torch.float32)
    model.generation_config = GenerationConfig(**special_ids)
    model.eval()
    return model
