"""Warmed-up toy models, built once and cached on disk under a Hub-like name such as "healtrl-toy/qwen2-add".

A name `healtrl-toy/<arch>-<family>` (families may be joined with "+", e.g. "healtrl-toy/llama-add+compare") maps,
together with every build and warm-up parameter, to a folder `<cache>/toy-<arch>-<family>-<hash>` holding a regular
`save_pretrained` checkpoint (model, generation config, tokenizer with its chat template) plus `healtrl_toy.json` (the
parameters and warm-up statistics). `<cache>` is `cache_dir`, else `$HEALTRL_CACHE`, else `~/.cache/healtrl`.

The first call builds the model (a few seconds); later calls only load it. Concurrent builders (e.g. the ranks of a
`torchrun` job) are serialised by a file lock, and a folder only appears, by an atomic rename, once it is complete.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..utils.filelock import file_lock
from ._utils import quiet_progress_bars
from .model import ARCHITECTURES, build_model
from .supervised import warmup
from .tasks import get_family
from .tokenizer import build_tokenizer, save_tokenizer

TOY_PREFIX = "healtrl-toy/"
# Bump when the tokenizer, model factory, tasks or warm-up change what a given name and parameters produce.
CACHE_FORMAT_VERSION = 1
METADATA_FILE = "healtrl_toy.json"


def default_cache_dir() -> Path:
    """The toy-model cache root: `$HEALTRL_CACHE` if set, else `~/.cache/healtrl`."""
    return Path(os.environ.get("HEALTRL_CACHE") or Path.home() / ".cache" / "healtrl").expanduser()


def is_toy_model_name(name: str) -> bool:
    """Whether `name` is a toy-model name ("healtrl-toy/...") rather than a Hub id or a local path."""
    return isinstance(name, str) and name.startswith(TOY_PREFIX)


def parse_toy_model_name(name: str) -> tuple[str, list[str]]:
    """Split "healtrl-toy/<arch>-<family>[+<family>...]" into `(arch, [family, ...])`, validating both."""
    if not is_toy_model_name(name):
        raise ValueError(f"Toy model names look like '{TOY_PREFIX}qwen2-add'; got {name!r}.")
    arch, sep, families = name[len(TOY_PREFIX) :].partition("-")
    if not sep or arch not in ARCHITECTURES:
        raise ValueError(
            f"Unknown architecture in {name!r}; use '{TOY_PREFIX}<arch>-<family>' with arch in {sorted(ARCHITECTURES)}."
        )
    family_list = families.split("+")
    for family in family_list:
        get_family(family)  # raises on unknown families
    return arch, family_list


def _spec(name: str, **params) -> dict:
    """Everything that determines a cached toy model: its key, also saved next to it."""
    arch, families = parse_toy_model_name(name)
    return {"format_version": CACHE_FORMAT_VERSION, "arch": arch, "family": families, **params}


def _folder_name(spec: dict) -> str:
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return f"toy-{spec['arch']}-{'+'.join(spec['family'])}-{digest}"


def _build(spec: dict, folder: Path) -> None:
    """Build, warm up and save a toy model into a fresh temporary folder, then rename it to `folder`."""
    tokenizer = build_tokenizer()
    model = build_model(
        spec["arch"],
        hidden_size=spec["hidden_size"],
        num_layers=spec["num_layers"],
        num_heads=spec["num_heads"],
        tokenizer=tokenizer,
        seed=spec["seed"],
        tie_word_embeddings=spec["tie_word_embeddings"],
    )
    world = {}
    if spec.get("demo_correct") is not None:
        # The reasoning world: imperfect demonstrations, and the stop decided on the target-domain families alone.
        from .world import demonstrations

        targets = [name for name in spec["family"] if get_family(name).domain == "target"] or spec["family"]
        world = dict(
            dataset=demonstrations(spec["family"], spec["demo_rows"], spec["demo_correct"], seed=spec["seed"]),
            eval_every=spec["eval_every"],
            lr_warmup_steps=spec["lr_warmup_steps"],
            num_threads=spec["threads"],
            family=targets,
        )
    stats = warmup(
        model,
        tokenizer,
        family=world.pop("family", spec["family"]),
        target_accuracy=spec["target_accuracy"],
        max_steps=spec["max_steps"],
        batch_size=spec["batch_size"],
        lr=spec["lr"],
        seed=spec["seed"],
        max_new_tokens=spec["max_new_tokens"],
        **({"probe_size": spec["probe_size"]} if "probe_size" in spec else {}),
        **world,
    )
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
        with quiet_progress_bars():
            model.save_pretrained(staging)
        save_tokenizer(tokenizer, staging)
        with open(staging / METADATA_FILE, "w", encoding="utf-8") as f:
            json.dump({"spec": spec, "warmup": stats}, f, indent=2)
            f.write("\n")
        for file in staging.iterdir():
            file.chmod(0o644)
        try:
            os.rename(staging, folder)  # atomic; fails if another process finished first
        except OSError:
            if not (folder / METADATA_FILE).exists():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


PLAIN_BUILD = dict(
    hidden_size=128,
    num_layers=2,
    num_heads=4,
    tie_word_embeddings=True,
    seed=0,
    target_accuracy=0.2,
    max_steps=2000,
    batch_size=64,
    lr=3e-3,
    max_new_tokens=4,
    demo_correct=None,
    demo_rows=16384,
    eval_every=50,
    lr_warmup_steps=100,
    threads=1,
    probe_size=None,
)
"""The build parameters of a toy model whose families are all answer-only (add, mul, compare, reverse)."""
DEMO_KEYS = ("demo_correct", "demo_rows", "eval_every", "lr_warmup_steps", "threads")
"""Parameters of the demonstration warm-up only (ignored, and not in the cache key, when `demo_correct` is None)."""


def default_build(name: str) -> dict:
    """The build parameters a toy name stands for: `PLAIN_BUILD`, or, when a family of `name` is checked by a
    verifier (Countdown), the reasoning world's (`PLAIN_BUILD` updated with `healtrl.toy.world.WORLD_BUILD`)."""
    _, families = parse_toy_model_name(name)
    if any(get_family(f).verify is not None for f in families):
        from .world import WORLD_BUILD

        return {**PLAIN_BUILD, **WORLD_BUILD}
    return dict(PLAIN_BUILD)


def _build_spec(name: str, **build) -> dict:
    """The spec (cache key) of toy model `name` built with `build` replacing the name's defaults."""
    params = default_build(name)
    unknown = sorted(set(build) - set(params))
    if unknown:
        raise TypeError(f"Unknown toy build parameter(s) {unknown}; the parameters are {sorted(params)}.")
    params.update(build)
    demo = {key: params.pop(key) for key in DEMO_KEYS}
    probe = params.pop("probe_size")
    if probe is not None and (isinstance(probe, bool) or not isinstance(probe, int) or probe < 1):
        raise ValueError(f"probe_size must be a positive integer or None (the warm-up's default, 512); got {probe!r}")
    # The demonstration keys and probe_size are in the cache key only when set, so the models built without them
    # keep their cache folders.
    return _spec(
        name,
        **params,
        **({} if demo["demo_correct"] is None else demo),
        **({} if probe is None else {"probe_size": probe}),
    )


def toy_model_path(
    name: str = "healtrl-toy/qwen2-add",
    cache_dir: str | os.PathLike | None = None,
    **build,
) -> str:
    """The local folder of a warmed-up toy model, building it first if it is not cached yet.

    The folder is a regular checkpoint: `AutoModelForCausalLM.from_pretrained(path)` and
    `AutoTokenizer.from_pretrained(path)` load it, so configs can name a toy model wherever they take a Hub id.

    Args:
        name: "healtrl-toy/<arch>-<family>", arch in qwen2/qwen3/llama, family a task family (or several joined
            with "+", warmed up on their mixture).
        cache_dir: Cache root; defaults to `default_cache_dir()`.
        **build: Build parameters that replace the name's defaults (`default_build(name)`; each combination is
            cached separately):
            hidden_size, num_layers, num_heads, tie_word_embeddings, seed: passed to `build_model` (seed also seeds
            the warm-up); target_accuracy, max_steps, batch_size, lr, max_new_tokens: passed to `warmup`;
            demo_correct: warm up on imperfect demonstrations (`healtrl.toy.world.demonstrations`, `demo_rows` rows,
            a Countdown row correct with this probability) instead of correct answers, checking the accuracy of the
            target-domain families only, every `eval_every` steps, the learning rate warmed up over
            `lr_warmup_steps`, on `threads` torch threads (the reasoning world's default); None: the plain warm-up,
            and those parameters are ignored. probe_size: rows of the warm-up's accuracy probe, which decides when
            the target accuracy is reached (None: `warmup`'s 512); a smaller probe makes a tiny build that stops at
            max_steps cheaper without changing its training (the probe samples with its own generator).

    Returns:
        The absolute path of the model folder, as a string.
    """
    spec = _build_spec(name, **build)
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    folder = (root / _folder_name(spec)).absolute()
    if not (folder / METADATA_FILE).exists():
        with file_lock(root / f".{folder.name}.lock"):
            if not (folder / METADATA_FILE).exists():  # another process may have built it while we waited
                _build(spec, folder)
    return str(folder)


def load_toy_model(
    name: str = "healtrl-toy/qwen2-add",
    cache_dir: str | os.PathLike | None = None,
    *,
    device: str | torch.device | None = None,
    **build_kwargs,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load a warmed-up toy model and its tokenizer, building and caching them on first use.

    Args:
        name: "healtrl-toy/<arch>-<family>", see `toy_model_path`.
        cache_dir: Cache root; defaults to `default_cache_dir()`.
        device: Where to put the model (default: CPU).
        **build_kwargs: Build parameters of `toy_model_path` that replace the name's defaults (hidden_size,
            num_layers, num_heads, tie_word_embeddings, seed, target_accuracy, max_steps, batch_size, lr,
            max_new_tokens, demo_correct, demo_rows, eval_every, lr_warmup_steps, threads, probe_size); each
            combination is cached separately.

    Returns:
        `(model, tokenizer)`: an fp32 model in eval mode and the toy tokenizer. The model's `config.name_or_path` is
        the cache folder, the path TRL loads the reference model (`beta > 0`) and a missing tokenizer from; the
        folder's metadata records `name`, which the model card and the curves' titles show instead of the folder
        (`toy_model_name`).
    """
    path = toy_model_path(name, cache_dir, **build_kwargs)
    with quiet_progress_bars():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if device is not None:
        model.to(device)
    model.eval()
    return model, AutoTokenizer.from_pretrained(path)


def toy_model_name(path: str | os.PathLike) -> str | None:
    """The "healtrl-toy/..." name a cached toy model folder was built for (what `load_toy_model` was given).

    Args:
        path: A folder (for instance a model's `config.name_or_path`).

    Returns:
        `"healtrl-toy/<arch>-<family>[+<family>...]"`, read from the folder's `healtrl_toy.json`; None when `path`
        holds no such file (not a toy model folder).
    """
    metadata = Path(path) / METADATA_FILE
    if not metadata.is_file():
        return None
    spec = toy_model_info(path)["spec"]
    return f"{TOY_PREFIX}{spec['arch']}-{'+'.join(spec['family'])}"


def toy_build_overrides(path: str | os.PathLike) -> dict:
    """The build parameters of a cached toy model folder that differ from its name's defaults (`default_build`).

    Args:
        path: A toy model folder (`toy_model_name(path)` is not None).

    Returns:
        Parameter -> value for every build parameter (`toy_model_path`'s `**build`) whose value differs from the one
        the name alone builds with; empty for the default build. The folder's cache-format version is not compared.

    Raises:
        ValueError: `path` is not a toy model folder.
    """
    name = toy_model_name(path)
    if name is None:
        raise ValueError(f"{os.fspath(path)!r} is not a toy model folder (it has no {METADATA_FILE}).")
    spec = toy_model_info(path)["spec"]
    default = _build_spec(name)
    skip = {"format_version", "arch", "family"}
    keys = [key for key in spec if key not in skip] + [key for key in default if key not in skip and key not in spec]
    return {key: spec.get(key) for key in keys if spec.get(key) != default.get(key)}


def toy_model_info(path: str | os.PathLike) -> dict:
    """The build parameters (`spec`) and warm-up statistics (`warmup`) stored with a cached toy model."""
    with open(Path(path) / METADATA_FILE, encoding="utf-8") as f:
        return json.load(f)
