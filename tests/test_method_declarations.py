"""What a method file declares once (issue #28 item 3): its card (`trainers/_card.py`), its config's choices (checked in
one loop, `base.check_choices`), HEAL's general-domain fields (`trainers/_general_data.py`, shared with `grpo`)."""

from __future__ import annotations

import dataclasses

import pytest
from trl import GRPOConfig

from healtrl.trainers import TRAINERS, EntropyGRPOConfig, EntropyGRPOTrainer
from healtrl.trainers._card import CardDescription, own_fields
from healtrl.trainers._general_data import GeneralDataConfig

TRL_FIELDS = {f.name for f in dataclasses.fields(GRPOConfig)}
CHOICE_FIELDS = [
    (name, config, f.name)
    for name, (_, config) in TRAINERS.items()
    for f in dataclasses.fields(config)
    if "choices" in f.metadata and f.name not in TRL_FIELDS
]


@pytest.mark.parametrize(("trainer", "config", "field"), CHOICE_FIELDS, ids=[f"{t}-{f}" for t, _, f in CHOICE_FIELDS])
def test_every_choice_field_is_checked(tmp_path, trainer, config, field):
    with pytest.raises(ValueError, match=rf"^{field} must be one of "):
        config(output_dir=str(tmp_path), use_cpu=True, report_to="none", **{field: "not-a-choice"})


@pytest.mark.parametrize("name", list(TRAINERS))
def test_cards_are_declared_once(name):
    trainer, config = TRAINERS[name]
    declared = trainer.card if trainer.card_variant_field is None else trainer.card_variants
    assert declared is not None
    own = own_fields(config, EntropyGRPOConfig)
    if trainer.card_variant_field is None:
        assert isinstance(trainer.card, CardDescription)
        assert list(trainer._card_method_fields) == own  # the config's own fields, in field order
        assert trainer._name == trainer.card.name and trainer._paper == dict(trainer.card.paper)
    else:
        for value, variant in trainer._card_variants.items():
            assert variant["fields"] == [f for f in own if f.startswith(f"{value}_")]
    assert set(trainer._card_dataset_fields) <= set(own)


def test_general_data_fields_are_one_piece():
    general = {f.name for f in dataclasses.fields(GeneralDataConfig)} - {
        f.name for f in dataclasses.fields(EntropyGRPOConfig)
    }
    assert general == {"general_dataset_name", "general_dataset_config", "general_dataset_split", "num_general_samples"}
    sharing = [name for name, (_, config) in TRAINERS.items() if issubclass(config, GeneralDataConfig)]
    assert sorted(sharing) == ["grpo", "heal"]


def test_base_trainer_card_is_grpo():
    assert EntropyGRPOTrainer._name == "GRPO" and EntropyGRPOTrainer._card_method_fields == ()
    assert EntropyGRPOTrainer._tag_names == ["trl", "grpo", "healtrl"]
