"""The model card of a healtrl trainer: what a method declares once, and how the card is written.

A method trainer declares its card in one place, a `CardDescription` (name, paper, two lines of description, the log
keys whose first and final values the card reports, Hub tags) assigned to the class attribute `card`. Its key
hyper-parameters are not listed by hand: they are the fields its config class adds to `EntropyGRPOConfig` (those whose
metadata does not say `"card": False`), in field order. A trainer whose method depends on a config field (the `grpo`
trainer's `entropy_method`) names the field in `card_variant_field` and gives one `CardDescription` per value in
`card_variants`; the card then lists that field and the fields named `<value>_...`. Config fields named
`..._dataset_name` are listed with the training datasets.

`ModelCardMixin` writes the card (`healtrl.model_card.build_model_card`) on `save_model`, `create_model_card` (TRL's
checkpoints and `push_to_hub`) and draws the curves (`save_curves`). From the declaration it sets TRL's model-card class
attributes (`_name`, `_paper`, `_tag_names`, through the boundary's `set_trl_card`) and healtrl's
(`_card_description`, `_card_summary_keys`, `_card_method_fields`, `_card_dataset_fields`, `_card_variants`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..model_card import CURVES_IMAGE
from ._inspect_hooks import write_entropy_summary

#: Hub tags of every healtrl trainer's card.
BASE_TAGS = ("trl", "grpo", "healtrl")


@dataclass(frozen=True)
class CardDescription:
    """A method as its model card shows it."""

    #: Method name, the card's heading.
    name: str
    #: `title`, arXiv `id` or None, BibTeX `citation`, optional `url` (`_papers.py`).
    paper: Mapping[str, Any]
    #: Two lines explaining the method, shown under its name.
    description: str
    #: Log keys whose first and final values the card reports, besides entropy and reward.
    summary_keys: tuple[str, ...] = ()
    #: Hub tags added to `BASE_TAGS`.
    tags: tuple[str, ...] = ()

    def as_variant(self, fields: list[str]) -> dict[str, Any]:
        return {
            "name": self.name,
            "paper": dict(self.paper),
            "description": self.description,
            "fields": fields,
            "summary_keys": list(self.summary_keys),
            "tags": list(self.tags),
        }


def own_fields(config_class: type, base_config: type) -> list[str]:
    """The init fields `config_class` adds to `base_config` that the card lists (metadata `"card"` not False)."""
    shared = {f.name for f in dataclasses.fields(base_config)}
    return [
        f.name
        for f in dataclasses.fields(config_class)
        if f.init and f.name not in shared and f.metadata.get("card", True)
    ]


class ModelCardMixin:
    """Writes the model card of the trainer's `card` declaration (see the module docstring)."""

    #: The method's card; set by each method trainer.
    card: CardDescription | None = None
    #: A config field the method depends on, and one card per value of it (the `grpo` trainer's `entropy_method`).
    card_variant_field: str | None = None
    card_variants: dict[str, CardDescription] = {}
    #: The config class whose fields every trainer shares: a method's card lists the fields its config adds to it.
    _card_base_config: type | None = None

    # Set from the declaration by `__init_subclass__` (TRL's `_name`, `_paper`, `_tag_names`, and healtrl's own).
    _card_description: str = ""
    _card_method_fields: tuple[str, ...] = ()
    _card_dataset_fields: tuple[str, ...] = ()
    _card_summary_keys: tuple[str, ...] = ()
    _card_variant_field: str | None = None
    _card_variants: dict[str, dict[str, Any]] = {}
    #: Shared GRPO fields listed in every card.
    _card_shared_fields: tuple[str, ...] = (
        "learning_rate",
        "max_steps",
        "per_device_train_batch_size",
        "gradient_accumulation_steps",
        "num_generations",
        "max_completion_length",
        "temperature",
        "beta",
        "loss_type",
        "epsilon",
        "epsilon_high",
        "num_iterations",
        "seed",
    )
    #: TRL fields listed only when set to something other than their default (TRL's own entropy tools, etc.).
    _card_optional_fields: tuple[str, ...] = (
        "num_train_epochs",
        "delta",
        "scale_rewards",
        "importance_sampling_level",
        "mask_truncated_completions",
        "top_entropy_quantile",
        "entropy_coef",
        "use_adaptive_entropy",
        "entropy_target",
        "top_p",
        "use_vllm",
    )

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        card = cls.__dict__.get("card")
        if card is not None:
            cls.set_trl_card(card.name, dict(card.paper), [*BASE_TAGS, *card.tags])  # the TRL boundary's
            cls._card_description = card.description
            cls._card_summary_keys = tuple(card.summary_keys)
        base = cls._card_base_config
        config_class = getattr(cls, "config_class", None)
        if base is None or config_class is None or "_card_method_fields" in cls.__dict__:
            return  # no config yet, or a subclass that lists its card's fields itself
        fields = own_fields(config_class, base)
        cls._card_dataset_fields = tuple(name for name in fields if name.endswith("_dataset_name"))
        if cls.card_variant_field is None:
            cls._card_method_fields = tuple(fields)
            return
        cls._card_variant_field = cls.card_variant_field
        cls._card_method_fields = ()
        cls._card_variants = {
            value: variant.as_variant([name for name in fields if name.startswith(f"{value}_")])
            for value, variant in cls.card_variants.items()
        }

    def model_card_method(self) -> dict[str, Any]:
        """The method this trainer runs, as its model card shows it.

        Returns:
            `{"name", "paper", "description", "fields", "summary_keys", "tags"}`: the trainer's `card` and its
            config's own fields (the class attributes `__init_subclass__` sets from them), overridden by the entry of
            `card_variants` that the config field `card_variant_field` selects.
        """
        info = {
            "name": self.card_name,
            "paper": self.card_paper,
            "description": self._card_description,
            "fields": list(self._card_method_fields),
            "summary_keys": list(self._card_summary_keys),
            "tags": self.card_tags,
        }
        field_name = self._card_variant_field
        if field_name is not None:
            value = getattr(self.args, field_name, None)
            if value is None:  # e.g. the `grpo` trainer given a plain EntropyGRPOConfig: its first variant
                value = next(iter(self._card_variants))
            if value not in self._card_variants:
                raise ValueError(
                    f"{type(self).__name__}.card_variants has no model-card entry for {field_name}={value!r}; add one "
                    f"(known: {', '.join(self._card_variants)})."
                )
            variant = self._card_variants[value]
            info.update(variant)
            if hasattr(self.args, field_name):
                info["fields"] = [field_name, *variant.get("fields", [])]
            info["tags"] = list(dict.fromkeys([*self.card_tags, *variant.get("tags", [])]))
        return info

    def model_card_fields(self) -> list[str]:
        """Names of the config fields of the method's key hyper-parameters, as listed in the model card."""
        return list(self.model_card_method()["fields"])

    def _model_card_hyperparameters(self, fields) -> dict[str, Any]:
        missing = [name for name in fields if not hasattr(self.args, name)]
        if missing:
            raise AttributeError(
                f"{type(self).__name__} lists {missing} as model-card fields, but {type(self.args).__name__} has no "
                "such field. The card lists the fields of the trainer's `config_class`: use that config class."
            )
        return {name: getattr(self.args, name) for name in fields}

    def _model_card_datasets(self, dataset_name) -> list[str]:
        if dataset_name is not None:
            return [dataset_name] if isinstance(dataset_name, str) else list(dataset_name)
        if self.model_card_datasets is not None:
            if isinstance(self.model_card_datasets, str):
                raise TypeError(
                    f"model_card_datasets must be a list of dataset names, got the string {self.model_card_datasets!r};"
                    f" set it to [{self.model_card_datasets!r}]."
                )
            return list(self.model_card_datasets)
        names = [self._card_train_dataset_name]
        names += [getattr(self.args, name, None) for name in self._card_dataset_fields]
        return [name for name in names if name]

    def _card_model_name(self, model_name: str | None) -> str:
        if model_name is not None:
            return model_name
        # as TRL's `_save_checkpoint` and transformers' `push_to_hub` name it
        hub_id = self.args.hub_model_id
        return hub_id.split("/")[-1] if hub_id else os.path.basename(os.path.normpath(self.args.output_dir))

    def _card_base_model(self) -> str | None:
        """The base model as the user named it: `model_card_base_model`, else the model config's `_name_or_path`."""
        model = self.accelerator.unwrap_model(self.model)
        return self.model_card_base_model or getattr(model.config, "_name_or_path", None) or None

    def curves_title(self, dataset_name: str | list[str] | None = None) -> str:
        """The title of `curves.png`: `<method>: <base model> on <datasets>`.

        The base model is `model_card_base_model` (the command line and the notebooks set it to the id the model was
        loaded with), else the model config's `_name_or_path`, shown as the model card shows it
        (`healtrl.model_card.published_model_name`: a Hub id as is, a toy or offline model's cache folder by its
        `healtrl-...` name, any other folder by its last path component); `base model not recorded` when neither is
        set. The datasets are the card's: `dataset_name` when given (as `create_model_card` takes it), else
        `model_card_datasets`, else the training dataset's `info.dataset_name` and the method's `..._dataset_name`
        fields; each is shown by the same rule, joined by ", ", and ` on ...` is left out when none is known. No
        output folder and no path of this machine appears in it.
        """
        from ..model_card import published_model_name

        base = self._card_base_model()
        model = published_model_name(base)[0] if base else "base model not recorded"
        # a dataset path (a local file or folder) is shown by its last component, as the card's dataset list shows it
        datasets = [published_model_name(name)[0] for name in self._model_card_datasets(dataset_name)]
        on = f" on {', '.join(datasets)}" if datasets else ""
        return f"{self.model_card_method()['name']}: {model}{on}"

    def save_curves(self, directory: str, dataset_name: str | list[str] | None = None) -> str | None:
        """Draw `curves.png`, entropy and reward of `state.log_history` against the step, into `directory`.

        The one place a run's curves are drawn: the model card embeds them (`save_model`, checkpoints, `push_to_hub`),
        and the command line calls it only when it saves no final model. Titled by `curves_title(dataset_name)`
        (method, base model, datasets). The entropy panel draws the targets the run logs
        (`healtrl.views.curves.LOGGED_TARGETS`: AER's H*, PosAdv's delta) and those its config sets
        (`healtrl.views.curves.config_targets(self.args)`: PosAdv's delta, TRL's adaptive-entropy target), each once,
        labelled with its value to 3 significant digits.

        Returns:
            The path of the image, or None (no file written) when neither entropy nor reward was logged.
        """
        from ..views.curves import DEFAULT_PANELS, config_targets, curve, draw_curves, save_figure

        history = self.state.log_history
        if not any(curve(history, keys)[1] for keys in DEFAULT_PANELS.values()):
            return None
        figure = draw_curves(history, title=self.curves_title(dataset_name), targets=config_targets(self.args))
        return save_figure(figure, os.path.join(directory, CURVES_IMAGE))

    def _write_model_card(self, directory: str, model_name=None, dataset_name=None, tags=None) -> str:
        """Write README.md (and curves.png, when entropy or reward were logged) into `directory`; returns the card."""
        from accelerate.utils import is_peft_model
        from datasets import __version__ as datasets_version
        from transformers import __version__ as transformers_version
        from trl import __version__ as trl_version

        from ..model_card import build_model_card, read_eval_results
        from ..utils.version import __version__ as healtrl_version

        method = self.model_card_method()
        model_name = self._card_model_name(model_name)
        if tags is None:
            tags = []
        elif isinstance(tags, str):
            tags = [tags]
        tags = [*method["tags"], *tags]
        model = self.accelerator.unwrap_model(self.model)
        peft = is_peft_model(model)
        base_model = self.model_card_base_model or getattr(model.config, "_name_or_path", None) or None
        shared = self._model_card_hyperparameters(self._card_shared_fields)
        defaults = {f.name: f.default for f in dataclasses.fields(self.args)}
        for name in self._card_optional_fields:
            if hasattr(self.args, name) and getattr(self.args, name) != defaults.get(name):
                shared[name] = getattr(self.args, name)

        os.makedirs(directory, exist_ok=True)
        history = self.state.log_history
        curves = CURVES_IMAGE if self.save_curves(directory, dataset_name) else None
        entropy_image = write_entropy_summary(self.args.output_dir, directory)  # from the views of inspect_every_steps
        versions = {
            "healtrl": healtrl_version,
            "TRL": trl_version,
            "Transformers": transformers_version,
            "PyTorch": torch.__version__,
            "Datasets": datasets_version,
        }
        if peft:
            from peft import __version__ as peft_version

            versions["PEFT"] = peft_version
        card = build_model_card(
            model_name=model_name,
            method=method["name"],
            description=method["description"],
            paper=method["paper"],
            load_path=getattr(self, "hub_model_id", None) or directory,
            base_model=base_model,
            datasets=self._model_card_datasets(dataset_name),
            method_hyperparameters=self._model_card_hyperparameters(method["fields"]),
            training_hyperparameters=shared,
            reward_functions=dict(zip(self.reward_func_names, self.reward_weights.tolist())),
            log_history=history,
            summary_keys=method["summary_keys"],
            curves_image=curves,
            entropy_image=entropy_image,
            eval_results=read_eval_results(directory),
            is_peft=peft,
            tags=tags,
            trainer_name=type(self).__name__,
            versions=versions,
        )
        with open(os.path.join(directory, "README.md"), "w", encoding="utf-8") as f:
            f.write(card)
        return card

    def create_model_card(
        self, model_name: str | None = None, dataset_name: str | list[str] | None = None, tags=None
    ) -> None:
        """Write the model card (`README.md`) and the entropy/reward curves (`curves.png`) into `args.output_dir`.

        Called by TRL for every checkpoint and by `push_to_hub` before the upload; main process only. See
        `healtrl.model_card.build_model_card` for the card's content.

        Args:
            model_name (`str`, *optional*):
                Title of the card. Defaults to the name of `args.hub_model_id`, else of the output folder.
            dataset_name (`str` or `list[str]`, *optional*):
                Training datasets. Defaults to `self.model_card_datasets`, else the training dataset's
                `info.dataset_name` (and the method's extra dataset fields, e.g. HEAL's `general_dataset_name`).
            tags (`str` or `list[str]`, *optional*):
                Hub tags added to the trainer's own (`trl`, `grpo`, `healtrl` and the method's).
        """
        if not self.is_world_process_zero():
            return
        self._write_model_card(self.args.output_dir, model_name=model_name, dataset_name=dataset_name, tags=tags)

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        """Save the model as `transformers.Trainer.save_model` does, then write its model card into the same folder.

        Args:
            output_dir (`str`, *optional*):
                Target folder. Defaults to `args.output_dir`.
            _internal_call (`bool`, *optional*, defaults to `False`):
                Set by the `Trainer` for its own calls (checkpoints, `push_to_hub`): no push to the Hub then.
        """
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self._write_model_card(output_dir if output_dir is not None else self.args.output_dir)
