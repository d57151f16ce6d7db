"""Sampling completions for evaluation (`healtrl.evaluation`), selection (`healtrl.selection`) and `healtrl inspect`,
and measuring their tokens under a plain model (`completion_token_stats`).

One transformers generator and one vLLM generator, used by all three, so that they sample and cut completions the same
way:

* **Sampling settings** are explicit (`SamplingSettings`: k, temperature, top_p, top_k, max_new_tokens, seed,
  batch_size). With transformers, the model's own `generation_config` is swapped out while generating, because
  `generate` fills every field left unset from it (e.g. a checkpoint's `min_p` or `repetition_penalty`), as TRL notes
  for transformers#42762. No repetition penalty, no compilation.
* **Cutting**: a completion keeps its tokens up to and including the first end-of-sequence token, where the eos
  tokens are every one the tokenizer and the model declare (`healtrl.utils.prompts.eos_token_ids`), as TRL's completion
  mask does; a completion without one is `truncated`. vLLM stops at the same ids (its own stop tokens, or `eos_ids`
  given explicitly).
* **Seeding** depends only on positions, never on batching across processes or on resuming. With transformers,
  sequence `i * k + j` is the j-th sample of prompt i (prompt i at its global index `indices[i]`), batches of
  `settings.batch_size` sequences are generated one `generate` call each, and a batch is sampled from
  `batch_seed(settings.seed, position of its first sequence)` inside `torch.random.fork_rng` (the caller's random
  stream is left as it was). With vLLM, the request of prompt `indices[i]` is seeded with
  `request_seed(settings.seed, indices[i])`. Evaluation and selection pass their own `batch_seed` / `request_seed`
  (evaluation: `eval_batch_seed`, and `settings.seed` for every vLLM request; selection derives both from the
  question's index), so their samples are those of earlier releases.
* **Processes**: with `procs` (a `healtrl.utils.distributed.Processes` of several processes), each process generates every
  `world`-th batch (vLLM: every `world`-th prompt) and the results are gathered in order on every process: the same
  completions as one process.
* **Token statistics** of sampled completions outside training (`completion_token_stats`: log-prob and exact entropy
  of every completion token, one no-grad forward through the fused LM head) are computed once here for selection and
  `healtrl inspect`. Inside a trainer the same quantities come from TRL's own forward under the fused head
  (`TRLBoundary.policy_forward`), which handles what a plain model call does not (TRL's left padding, vision inputs,
  `logits_to_keep`, FSDP/ZeRO-3 gathering).
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from .utils.distributed import Processes, interleave
from .utils.numbers import is_number
from .utils.prompts import eos_token_ids


@dataclass
class SamplingSettings:
    """How completions are sampled.

    Attributes:
        k: Completions per problem.
        temperature: Sampling temperature; 0 decodes greedily (then every one of the k samples is the same).
        top_p: Nucleus sampling threshold (1.0: off).
        top_k: Keep the k most likely tokens (0: off).
        max_new_tokens: Most tokens generated per completion.
        seed: Seed of the sampling. Each task is sampled from this seed, so a task's result does not depend on the
            other tasks evaluated with it.
        batch_size: Sequences per `generate` call (transformers backend; vLLM schedules its own batches).
    """

    k: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 4096
    seed: int = 0
    batch_size: int = 64

    def __post_init__(self):
        checks = [
            ("k", isinstance(self.k, int) and not isinstance(self.k, bool) and self.k >= 1, "a positive integer"),
            ("temperature", is_number(self.temperature) and self.temperature >= 0, "a number >= 0"),
            ("top_p", is_number(self.top_p) and 0 < self.top_p <= 1, "a number in (0, 1]"),
            ("top_k", isinstance(self.top_k, int) and self.top_k >= 0, "an integer >= 0 (0: off)"),
            ("max_new_tokens", isinstance(self.max_new_tokens, int) and self.max_new_tokens >= 1, "a positive integer"),
            ("seed", isinstance(self.seed, int), "an integer"),
            ("batch_size", isinstance(self.batch_size, int) and self.batch_size >= 1, "a positive integer"),
        ]
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"`{name}` must be {expected}, got {getattr(self, name)!r}.")


@dataclass
class Completion:
    """One sampled completion: its text (special tokens skipped), token ids (up to and including the first
    end-of-sequence token) and whether it hit `max_new_tokens` first."""

    text: str
    token_ids: list[int] = field(default_factory=list)
    truncated: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


def eval_batch_seed(seed: int, start: int) -> int:
    """The seed of the evaluation batch whose first sequence is `start` (the same for any number of processes)."""
    digest = hashlib.sha256(f"healtrl-eval:{seed}:{start}".encode()).hexdigest()
    return int(digest[:15], 16)


def cut_at_eos(ids: Sequence[int], eos_ids: set[int]) -> tuple[list[int], bool]:
    """(tokens up to and including the first eos, whether there was none): TRL's completion mask."""
    ids = [int(t) for t in ids]
    for i, token in enumerate(ids):
        if token in eos_ids:
            return ids[: i + 1], False
    return ids, True


def _progress(total: int, desc: str, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="sample", disable=not enabled, dynamic_ncols=True, leave=False)


@contextmanager
def _only_generation_config(model, config):
    """Generate with exactly `config` (see the module docstring: transformers#42762)."""
    original = model.generation_config
    model.generation_config = config
    try:
        yield
    finally:
        model.generation_config = original


class TransformersGenerator:
    """Samples completions with transformers' `generate`, in left-padded batches of `settings.batch_size` sequences
    (as TRL's GRPOTrainer generates without vLLM).

    Args:
        model: A causal LM (`PreTrainedModel`, or a `PeftModel`).
        tokenizer: Its tokenizer; needs a pad or an end-of-sequence token.
        batch_seed: `(seed, position of a batch's first sequence) -> seed of that batch`.

    Raises:
        ValueError: neither the tokenizer nor the model declares an end-of-sequence token.
    """

    name = "transformers"

    def __init__(self, model, tokenizer, batch_seed: Callable[[int, int], int] = eval_batch_seed):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_seed = batch_seed
        self.eos_token_ids = eos_token_ids(tokenizer, model)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_token_ids[0]
        self.pad_token_id = int(pad)

    def _generation_config(self, settings: SamplingSettings):
        from transformers import GenerationConfig

        greedy = settings.temperature == 0
        return GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else float(settings.temperature),
            top_p=float(settings.top_p),
            top_k=int(settings.top_k),
            repetition_penalty=1.0,
            max_new_tokens=int(settings.max_new_tokens),
            eos_token_id=self.eos_token_ids,
            pad_token_id=self.pad_token_id,
            disable_compile=True,
        )

    def _device(self):
        head = self.model.get_output_embeddings() if hasattr(self.model, "get_output_embeddings") else None
        if head is not None:
            return head.weight.device
        return next(self.model.parameters()).device

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        settings: SamplingSettings,
        desc: str = "",
        progress: bool = True,
        procs: Processes | None = None,
        indices: Sequence[int] | None = None,
    ) -> list[list[Completion]]:
        """`settings.k` completions for each prompt (given as token ids); `indices`: the prompts' global indices
        (default 0, 1, ...), which the seeds depend on (see the module docstring)."""
        import torch

        procs = procs or Processes()
        indices = list(range(len(prompt_ids))) if indices is None else list(indices)
        if len(indices) != len(prompt_ids):
            raise ValueError(f"{len(indices)} indices for {len(prompt_ids)} prompts.")
        model, k = self.model, settings.k
        device = self._device()
        config = self._generation_config(settings)
        eos = set(self.eos_token_ids)
        # Every prompt k times, in order: sequence s belongs to prompt s // k.
        sequences = [list(ids) for ids in prompt_ids for _ in range(k)]
        starts = list(range(0, len(sequences), settings.batch_size))
        mine: list[list[Completion]] = []
        devices = [device] if device.type == "cuda" else []
        was_training = model.training
        model.eval()
        try:
            with (
                torch.no_grad(),
                torch.random.fork_rng(devices=devices),
                _only_generation_config(model, config),
                _progress(len(sequences), desc, progress and procs.is_main) as bar,
            ):
                for unit in procs.mine(len(starts)):
                    start = starts[unit]
                    out: list[Completion] = []
                    mine.append(out)
                    torch.manual_seed(self.batch_seed(settings.seed, indices[start // k] * k + start % k))
                    batch = sequences[start : start + settings.batch_size]
                    length = max(len(ids) for ids in batch)
                    input_ids = torch.full((len(batch), length), self.pad_token_id, dtype=torch.long)
                    attention_mask = torch.zeros((len(batch), length), dtype=torch.long)
                    for row, ids in enumerate(batch):  # left padding: every row continues at the last position
                        input_ids[row, length - len(ids) :] = torch.tensor(ids, dtype=torch.long)
                        attention_mask[row, length - len(ids) :] = 1
                    generated = model.generate(
                        input_ids=input_ids.to(device),
                        attention_mask=attention_mask.to(device),
                        generation_config=config,
                    )
                    for row in generated[:, length:].tolist():
                        ids, truncated = cut_at_eos(row, eos)
                        text = self.tokenizer.decode(ids, skip_special_tokens=True)
                        out.append(Completion(text=text, token_ids=ids, truncated=truncated))
                    bar.update(len(batch) * procs.world)
        finally:
            model.train(was_training)
        flat = [c for batch in interleave(procs.gather(mine), len(starts), procs.world) for c in batch]
        return [flat[i * k : (i + 1) * k] for i in range(len(prompt_ids))]


class VLLMGenerator:
    """Samples completions with a vLLM engine in this process (`n = k` samples per request).

    Args:
        model: A local folder or Hub id.
        dtype: vLLM's `dtype` ("auto", "bfloat16", ...).
        seed: Seed of the engine.
        tensor_parallel_size, gpu_memory_utilization, max_model_len, trust_remote_code: passed to `vllm.LLM`.
        llm: An existing `vllm.LLM` to reuse instead of building one.
        request_seed: `(seed, global index of a prompt) -> seed of its request`; None: every request is seeded with
            `settings.seed` (one `SamplingParams` for all).
        eos_ids: End-of-sequence ids, given to vLLM as stop tokens and where completions are cut (pass the policy's
            `healtrl.utils.prompts.eos_token_ids` to match the transformers generator exactly). None: vLLM's own stop
            tokens, which are the tokenizer's eos and the model's `generation_config.json` eos ids, the same set.
        detokenize: Whether vLLM decodes the completions (`Completion.text`; "" when False).
        feature: What needs vLLM, for the error when it is not installed.
    """

    name = "vllm"

    def __init__(
        self,
        model: str | None = None,
        *,
        dtype: str = "auto",
        seed: int = 0,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.9,
        max_model_len: int | None = None,
        trust_remote_code: bool = False,
        llm=None,
        request_seed: Callable[[int, int], int] | None = None,
        eos_ids: Sequence[int] | None = None,
        detokenize: bool = True,
        feature: str = "Generation with vLLM (`--backend vllm`)",
    ):
        from .utils.compat import require

        self.vllm = require("vllm", feature)
        if llm is None:
            kwargs = dict(
                model=model,
                dtype=dtype,
                seed=seed,
                tensor_parallel_size=tensor_parallel_size,
                gpu_memory_utilization=gpu_memory_utilization,
                trust_remote_code=trust_remote_code,
            )
            if max_model_len is not None:
                kwargs["max_model_len"] = max_model_len
            llm = self.vllm.LLM(**kwargs)
        self.llm = llm
        self.request_seed = request_seed
        self.eos_token_ids = None if eos_ids is None else [int(i) for i in eos_ids]
        self.detokenize = detokenize

    def _params(self, settings: SamplingSettings, seed: int):
        kwargs = dict(
            n=settings.k,
            temperature=float(settings.temperature),
            top_p=float(settings.top_p),
            top_k=int(settings.top_k) if settings.top_k > 0 else -1,
            max_tokens=int(settings.max_new_tokens),
            seed=seed,
        )
        if self.eos_token_ids is not None:
            kwargs["stop_token_ids"] = list(self.eos_token_ids)
        if not self.detokenize:
            kwargs["detokenize"] = False
        return self.vllm.SamplingParams(**kwargs)

    def generate(
        self,
        prompt_ids: Sequence[Sequence[int]],
        settings: SamplingSettings,
        desc: str = "",
        progress: bool = True,
        procs: Processes | None = None,
        indices: Sequence[int] | None = None,
    ) -> list[list[Completion]]:
        """`settings.k` completions for each prompt (given as token ids); see the module docstring for seeds and
        processes."""
        procs = procs or Processes()
        indices = list(range(len(prompt_ids))) if indices is None else list(indices)
        if procs.distributed:
            units = len(prompt_ids)
            chosen = list(procs.mine(units))
            mine = self.generate(
                [prompt_ids[i] for i in chosen],
                settings,
                desc,
                progress and procs.is_main,
                None,
                [indices[i] for i in chosen],
            )
            return interleave(procs.gather(mine), units, procs.world)
        if self.request_seed is None:
            params = self._params(settings, settings.seed)
        else:
            params = [self._params(settings, self.request_seed(settings.seed, index)) for index in indices]
        requests = [{"prompt_token_ids": list(ids)} for ids in prompt_ids]
        if progress and desc:
            print(f"{desc}: {len(requests)} prompts x {settings.k} samples with vLLM", file=sys.stderr)
        outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=progress)
        eos = set(self.eos_token_ids or ())
        results = []
        for request in outputs:
            completions = []
            for o in request.outputs:
                ids, no_eos = cut_at_eos(o.token_ids, eos)
                text = (o.text or "") if self.detokenize else ""
                completions.append(Completion(text=text, token_ids=ids, truncated=o.finish_reason == "length"))
            if len(completions) != settings.k:
                raise RuntimeError(f"vLLM returned {len(completions)} completions for a prompt, expected {settings.k}.")
            results.append(completions)
        return results


# ----------------------------------------------------------------------------------------------------------------
# Token statistics of completions under a plain model
# ----------------------------------------------------------------------------------------------------------------
def check_plain_lm_head(model, error: type[Exception] = ValueError) -> None:
    """Fail for LM heads the fused kernel does not compute exactly (soft-capping, logit scaling), as TRL lists them."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    if getattr(config, "final_logit_softcapping", None) is not None:
        raise error(
            f"The model ({config.model_type}) soft-caps its final logits, which healtrl's fused LM-head kernel does not "
            "compute: its entropies would be wrong. Choose a model without `final_logit_softcapping`."
        )
    for name in ("logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling"):
        value = getattr(config, name, None)
        if value is not None and value != 1:
            raise error(
                f"The model ({config.model_type}) scales its logits (`{name}` = {value}), which healtrl's fused LM-head "
                "kernel does not apply: its entropies would be wrong. Choose a model without logit scaling."
            )


def completion_token_stats(
    model,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    batch_size: int | None = None,
    progress: bool = False,
    desc: str = "entropies",
    error: type[Exception] = ValueError,
):
    """Log-prob and exact full-vocabulary entropy of the model at every completion token, from no-grad forwards.

    Each sequence is prompt + completion, right-padded (so every real token keeps its position). The model's final
    hidden states and its output embedding go through `healtrl.kernels.fused_logprob_entropy`, which never holds the
    [tokens x vocabulary] logits; the logits are divided by `temperature` as TRL does, so the values at completion
    token t are log p(token_t) and H(softmax(z_t / T)) of the distribution that sampled it. The model's train/eval
    mode is the caller's.

    Args:
        model: A causal LM (`PreTrainedModel` with `base_model` and `get_output_embeddings()`).
        prompt_ids: Token ids of each prompt (no padding, at least one token).
        completion_ids: Token ids of each completion (no padding; may be empty).
        temperature: Sampling temperature (> 0).
        batch_size: Sequences per forward (default: all at once).
        progress: Show a progress bar (sequences).
        desc: The progress bar's label.
        error: The exception class for an unsupported model (selection raises its `SelectionError`).

    Returns:
        `(logps, entropies)`: two lists with one float32 CPU tensor per sequence, one value per completion token.
    """
    import torch

    from .kernels import fused_logprob_entropy

    if len(prompt_ids) != len(completion_ids):
        raise ValueError(f"{len(prompt_ids)} prompts for {len(completion_ids)} completions")
    if any(len(p) == 0 for p in prompt_ids):
        raise ValueError("every prompt needs at least one token (the first completion token is predicted from it)")
    check_plain_lm_head(model, error)
    backbone = model.base_model
    if backbone is model:
        raise error(f"{type(model).__name__} exposes no backbone (`base_model`) to take hidden states from.")
    head = model.get_output_embeddings()
    weight, bias = head.weight, getattr(head, "bias", None)
    device = weight.device
    pad_id = 0  # any valid id: padded positions come after every real token and are never read
    batch_size = batch_size or max(1, len(prompt_ids))
    logps: list[torch.Tensor] = []
    entropies: list[torch.Tensor] = []
    with torch.no_grad(), _progress(len(prompt_ids), desc, progress) as bar:
        for start in range(0, len(prompt_ids), batch_size):
            prompts = prompt_ids[start : start + batch_size]
            completions = completion_ids[start : start + batch_size]
            lengths = [len(c) for c in completions]
            bar.update(len(prompts))
            if not any(lengths):
                logps += [torch.zeros(0) for _ in completions]
                entropies += [torch.zeros(0) for _ in completions]
                continue
            rows = [list(p) + list(c) for p, c in zip(prompts, completions)]
            width = max(len(r) for r in rows)
            input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
            attention_mask = torch.zeros_like(input_ids)
            for i, row in enumerate(rows):
                input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
                attention_mask[i, : len(row)] = 1
            input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
            hidden = backbone(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
            # Completion token j of row i sits at position p_i + j and is predicted by the hidden state at p_i + j - 1.
            row_idx = [i for i, c in enumerate(completions) for _ in c]
            pos_idx = [q for p, c in zip(prompts, completions) for q in range(len(p) - 1, len(p) + len(c) - 1)]
            rows_t = torch.tensor(row_idx, device=device)
            pos_t = torch.tensor(pos_idx, device=device)
            out = fused_logprob_entropy(
                hidden[rows_t, pos_t].to(weight.dtype),
                weight,
                input_ids[rows_t, pos_t + 1],
                bias=bias,
                temperature=float(temperature),
            )
            logps += list(torch.split(out.logp.float().cpu(), lengths))
            entropies += list(torch.split(out.entropy.float().cpu(), lengths))
    return logps, entropies
