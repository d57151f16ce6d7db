"""Per-token statistics of the policy read off the LM-head calls of transformers' `generate` (no extra forward).

transformers' plain `generate` calls the LM head once per decoding step (the prefill gives the distribution of the
first completion token) and the input embeddings once per step with the token sampled at the step before.
`GenerationStats` hooks both modules for the duration of one `generate` call and keeps, per step and sequence:

- `entropy`: -sum_v p_v log p_v,
- `logp`: log p of the token that was sampled (gathered when the next step embeds it; the last step's token is taken
  from the returned completion ids),
- `sum_p2`, `sum_p2_logp`: sum_v p_v^2 and sum_v p_v^2 log p_v (only with `power_sums=True`),

of p = softmax(z / T), where z is the LM head's own output (before generate's logits processors: top-p, top-k,
min-p, repetition penalty only change how the token is drawn, not the policy the loss trains) and T is the training
temperature, the one TRL's loss divides the logits by. These are the numbers TRL's loss forward computes for the same
tokens with the same weights (within float32 rounding; the forward is over the padded batch, generation over the KV
cache), provided the model's output does not depend on the absolute position of left padding (RoPE and other relative
position schemes; all current decoder LLMs) and has no dropout.

Nothing of size (steps, B, V) is kept: one (B, V) log-softmax waits for its sampled token at a time.
"""

from __future__ import annotations

import torch

STAT_KEYS = ("logp", "entropy", "sum_p2", "sum_p2_logp")


class GenerationStats:
    """Context manager recording per-token statistics during one `generate` call of `model`.

    Args:
        model: The unwrapped causal LM that generates (its `get_output_embeddings()` / `get_input_embeddings()` are
            hooked).
        temperature: Training temperature T: statistics are of softmax(logits / T).
        power_sums: Also record sum_v p^2 and sum_v p^2 log p.
    """

    def __init__(self, model, temperature: float, *, power_sums: bool = False):
        self.head = model.get_output_embeddings()
        self.embed = model.get_input_embeddings()
        if self.head is None or self.embed is None:
            raise ValueError(f"{type(model).__name__} exposes no input or output embeddings to read generation from.")
        self.temperature = float(temperature)
        self.power_sums = power_sums
        self.steps: list[dict[str, torch.Tensor]] = []
        self._pending: torch.Tensor | None = None  # log-softmax of the last step, waiting for its sampled token
        self._handles: list = []

    def __enter__(self) -> GenerationStats:
        self._handles = [
            self.embed.register_forward_pre_hook(self._on_embed),
            self.head.register_forward_hook(self._on_head),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def _on_head(self, module, args, output) -> None:
        logits = output[0] if isinstance(output, tuple) else output
        logp = torch.log_softmax(logits[:, -1, :].float() / self.temperature, dim=-1)
        p = logp.exp()
        p_logp = (p * logp).nan_to_num_(0.0)  # 0 log 0 = 0 (a -inf logit)
        step = {"entropy": -p_logp.sum(-1)}
        if self.power_sums:
            step["sum_p2"] = p.square().sum(-1)
            step["sum_p2_logp"] = (p * p_logp).sum(-1)
        self.steps.append(step)
        self._pending = logp

    def _on_embed(self, module, args) -> None:
        if self._pending is None:  # the prefill, before any LM-head call
            return
        if not args or not isinstance(args[0], torch.Tensor) or args[0].dim() != 2:
            return  # embeddings called without positional token ids: the step's token stays unknown (`per_token`: None)
        token = args[0][:, -1]  # with or without KV cache, the newest token is the last column
        step = self.steps[-1]
        step["token"] = token
        step["logp"] = self._pending.gather(1, token.unsqueeze(1)).squeeze(1)
        self._pending = None

    def per_token(self, completion_ids: list[list[int]]) -> dict[str, torch.Tensor] | None:
        """(B, T) tensors of the statistics, T the longest completion, zero past each completion's end.

        Returns None when the recorded calls do not line up with `completion_ids` (a step count or batch size that
        differs, or an embedded token that is not the completion's): the caller then computes the statistics with a
        forward pass.
        """
        longest = max((len(ids) for ids in completion_ids), default=0)
        batch = len(completion_ids)
        if longest == 0 or len(self.steps) < longest or any(s["entropy"].size(0) != batch for s in self.steps):
            return None
        device = self.steps[0]["entropy"].device
        padded = [list(seq) + [-1] * (longest - len(seq)) for seq in completion_ids]
        ids = torch.tensor(padded, dtype=torch.long, device=device)
        valid = ids >= 0
        steps = self.steps[:longest]
        last = steps[-1]
        if "logp" not in last:  # generation stopped after sampling it: its token comes from the completions
            token = ids[:, longest - 1].clamp_min(0)
            last["token"] = token
            last["logp"] = self._pending.gather(1, token.unsqueeze(1)).squeeze(1)
            self._pending = None
        if any("token" not in s for s in steps):
            return None
        seen = torch.stack([s["token"] for s in steps], dim=1)
        if not torch.equal(seen[valid], ids[valid]):
            return None
        keys = STAT_KEYS if self.power_sums else STAT_KEYS[:2]
        return {key: torch.stack([s[key] for s in steps], dim=1) * valid for key in keys}
