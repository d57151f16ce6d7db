"""Data passed, not stashed (issue #41, item 2): a trainer keeps nothing of one hook call for the next on `self`.

What one call of a hook needs reaches it as an argument (the loss batch, the rollout statistics, the gathered rewards,
H_t in `update_controller`), and what the boundary decides or sees inside one TRL call lives in that call's state
object (`_trl/hooks.py`: `LossCall`, `GenerationCall`). What lasts across steps is the method's state, saved by
`method_state` and restored by `load_method_state`.

- `test_no_instance_state_is_set_outside_the_allowed_places`: every class of the registered trainers' MROs that lives
  in `healtrl/trainers/` (the method files, the mixins, the base and the boundary; derived from `TRAINERS`) is
  parsed, and each assignment to `self.<name>` (or `self.<name>[...]`) outside `__init__` and `load_method_state` must
  be in `ALLOWED`, which names its reason; an entry that no longer occurs fails too, so the list stays the list.
- `test_method_state_entries_are_saved`: an assignment allowed as method state is read by `method_state` of the same
  class, i.e. it is checkpointed.
- `test_scan_finds_planted_assignments`: the scanner flags a hook that stashes, and not `__init__`.
- `test_saved_method_state_keys_load_unchanged`: the JSON keys a checkpoint holds are those earlier healtrl versions
  wrote, and a state of that form loads and is saved again unchanged (no migration needed).
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import warnings
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAINERS_DIR = REPO / "healtrl" / "trainers"

#: Functions that may set instance attributes: construction, and restoring the checkpointed method state.
CONSTRUCTION = ("__init__", "load_method_state")

METHOD_STATE = "method state: moved by this hook, saved by `method_state`, restored by `load_method_state`"
INIT = "called from the trainer's `__init__` (`init_entropy_control` is the mixin's constructor)"
RESUME = "TRL's own state, which TRL does not checkpoint: restored from healtrl's checkpoint on resume"
ONCE = "once per trainer, not per call: a warning or log line given at most once (not checkpointed: a resumed run "

#: (class, function, attribute) -> why that function sets that attribute on the trainer.
ALLOWED: dict[tuple[str, str, str], str] = {
    # -- the entropy-control and random-stream mixins (`_control.py`) ---------------------------------------------
    ("EntropyControlMixin", "init_entropy_control", "_controller_update"): INIT,
    ("EntropyControlMixin", "init_entropy_control", "_entropy_measure"): INIT,
    ("EntropyControlMixin", "init_entropy_control", "_entropy_window"): INIT,
    ("EntropyControlMixin", "record_entropy", "_entropy_window"): METHOD_STATE,  # the controller's one accumulator
    ("EntropyControlMixin", "optimizer_step_end", "_entropy_window"): METHOD_STATE,  # emptied at a window's end
    ("RandomStreamMixin", "next_generator", "_rng_calls"): METHOD_STATE,
    # -- the methods -----------------------------------------------------------------------------------------------
    ("AERTrainer", "update_controller", "alpha"): METHOD_STATE,  # C3, eq. 11
    ("AERTrainer", "update_controller", "initial_entropy"): METHOD_STATE,  # C2: H0, the first H_t
    ("AERTrainer", "before_training", "initial_entropy"): METHOD_STATE,  # C2: H0 estimated before training
    ("PosAdvTrainer", "update_controller", "lam"): METHOD_STATE,  # eq. 5
    # -- the base trainer (`base.py`) ------------------------------------------------------------------------------
    ("EntropyGRPOTrainer", "step_sums", "_open_step_sums"): (
        "`step_sums`, the per-step accumulator of the base's accessor: this process's sums of the open optimizer step"
    ),
    ("EntropyGRPOTrainer", "step_sums", "_closed_step_sums"): (
        "`step_sums`: the step's totals, handed to `optimizer_step_end` by the step-end callback and emptied there"
    ),
    # -- the TRL boundary (`_trl/`) --------------------------------------------------------------------------------
    ("BoundaryHooks", "_inside", "_call"): (
        "the state object of the TRL call running now, set for the call's duration and restored after it: TRL calls "
        "the methods the boundary overrides inside it with TRL's arguments, through which nothing else can be passed"
    ),
    ("GenerationCalls", "_generate", "_warned_generation_stats"): ONCE + "may warn again)",
    ("GenerationCalls", "_provide_rollout_stats", "_stats_sources_logged"): ONCE + "logs the source again)",
    ("CheckpointCalls", "_restore_rollout_position", "_step"): RESUME + " (the micro-batch count)",
    ("CheckpointCalls", "_load_mid_rollout_state", "_buffered_inputs"): RESUME + " (this process's rollout batch)",
    ("CheckpointCalls", "_load_mid_rollout_state", "_entropy_window_stats"): RESUME + " (the adaptive-entropy window)",
}


def _stored_attribute(target: ast.AST) -> ast.Attribute | None:
    """The `self.<name>` a store target writes: `self.x` or `self.x[...]`, else None."""
    if isinstance(target, ast.Subscript):
        target = target.value
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return target
    return None


def instance_stores(class_source: str) -> list[tuple[str, str, int]]:
    """(function, attribute, line) of every assignment to `self.<attribute>` (or `self.<attribute>[...]`) in the
    methods of the class in `class_source`, nested functions counted as their method's, outside `CONSTRUCTION`."""
    tree = ast.parse(textwrap.dedent(class_source))
    class_def = tree.body[0]
    assert isinstance(class_def, ast.ClassDef)
    found = []
    for function in class_def.body:
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef) or function.name in CONSTRUCTION:
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            else:
                continue
            for target in targets:
                for part in ast.walk(target) if isinstance(target, ast.Tuple | ast.List) else [target]:
                    attribute = _stored_attribute(part)
                    if attribute is not None:
                        found.append((function.name, attribute.attr, node.lineno))
    return found


def trainer_classes() -> list[type]:
    """The classes of the registered trainers' MROs defined in `healtrl/trainers/` (method files, mixins, base,
    boundary), each once."""
    from healtrl.trainers import TRAINERS

    classes: dict[str, type] = {}
    for trainer, _ in TRAINERS.values():
        for cls in trainer.__mro__:
            path = inspect.getsourcefile(cls) if cls.__module__.startswith("healtrl.") else None
            if path and Path(path).resolve().is_relative_to(TRAINERS_DIR):
                classes[f"{cls.__module__}.{cls.__qualname__}"] = cls
    return list(classes.values())


def test_trainer_classes_are_derived_from_the_registry():
    names = {cls.__name__ for cls in trainer_classes()}
    expected = {"AERTrainer", "PosAdvTrainer", "OPEFOTrainer", "HEALTrainer", "GRPOBaselineTrainer"}
    expected |= {"EntropyControlMixin", "RandomStreamMixin", "EntropyGRPOTrainer", "TRLBoundary", "GenerationCalls"}
    expected |= {"LossCalls", "CheckpointCalls", "BoundaryHooks", "LMHeadForwards"}
    assert expected <= names, f"missing from the scan: {sorted(expected - names)}"


def test_no_instance_state_is_set_outside_the_allowed_places():
    found: dict[tuple[str, str, str], str] = {}
    for cls in trainer_classes():
        source, first_line = inspect.getsourcelines(cls)
        path = Path(inspect.getsourcefile(cls)).resolve().relative_to(REPO)
        for function, attribute, line in instance_stores("".join(source)):
            found.setdefault((cls.__name__, function, attribute), f"{path}:{first_line + line - 1}")
    unexpected = [
        f"{where}: {c}.{f} sets self.{a}" for (c, f, a), where in sorted(found.items()) if (c, f, a) not in ALLOWED
    ]
    assert not unexpected, (
        "a trainer sets instance state outside __init__ / load_method_state: pass the data as a hook argument or "
        "return value, keep per-call state in the boundary's call state (LossCall, GenerationCall), or make it "
        "method state (saved by method_state) and add it to ALLOWED with its reason:\n" + "\n".join(unexpected)
    )
    stale = sorted(set(ALLOWED) - set(found))
    assert not stale, f"ALLOWED names assignments that no longer occur (remove them): {stale}"


def test_method_state_entries_are_saved():
    by_name = {cls.__name__: cls for cls in trainer_classes()}
    unsaved = []
    for (class_name, function, attribute), reason in ALLOWED.items():
        if reason != METHOD_STATE:
            continue
        cls = by_name[class_name]
        saver = vars(cls).get("method_state")
        read = set()
        if saver is not None:
            tree = ast.parse(textwrap.dedent(inspect.getsource(saver)))
            read = {
                node.attr
                for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
            }
        if attribute not in read:
            unsaved.append(
                f"{class_name}.{function} sets self.{attribute}, which {class_name}.method_state never reads"
            )
    assert not unsaved, "method state that no checkpoint saves:\n" + "\n".join(unsaved)


def test_scan_finds_planted_assignments():
    source = """
    class Planted:
        def __init__(self):
            self._fine = 0

        def shape_advantages(self, advantages, batch):
            self._selected = batch.mask
            self.count += 1
            self._buffer[0] = 1
            first, self._second = 1, 2

            def inner():
                self._nested: int = 3

            inner()
            return None

        def load_method_state(self, state):
            self._fine = state["fine"]
    """
    found = {(function, attribute) for function, attribute, _ in instance_stores(source)}
    assert found == {
        ("shape_advantages", "_selected"),
        ("shape_advantages", "count"),
        ("shape_advantages", "_buffer"),
        ("shape_advantages", "_second"),
        ("shape_advantages", "_nested"),
    }


# The checkpointed method state's keys, as healtrl wrote them before the generation call state (issue #41 item 2).
SAVED_STATES = {
    "aer": {"alpha": 0.015, "initial_entropy": 1.25, "window_entropy": [12.5, 10.0]},
    "posadv": {"lambda": 0.05, "window_entropy": None, "rng_calls": 3},
    "grpo": {"rng_calls": 7},
    "opefo": {},
    "heal": {},
}


@pytest.mark.parametrize("name", sorted(SAVED_STATES))
def test_saved_method_state_keys_load_unchanged(tmp_path, name):
    from healtrl.trainers import TRAINERS
    from tests.helpers import build_trainer

    trainer_cls, config_cls = TRAINERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name == "heal":
            from tests.test_heal import heal_trainer

            trainer = heal_trainer(tmp_path, cls=trainer_cls)
        else:
            trainer = build_trainer(trainer_cls, config_cls, tmp_path)
    saved = SAVED_STATES[name]
    assert set(trainer.method_state()) == set(saved)
    trainer.load_method_state(saved)
    assert trainer.method_state() == saved
