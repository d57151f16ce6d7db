"""How many micro-batches one rollout batch lasts is computed in one place (issue #41, item 1).

TRL 1.16 regenerates in `GRPOTrainer._prepare_inputs` when `self._step % generate_every == 0`, with
`generate_every = self.args.steps_per_generation * self.num_iterations` (`_step` counts `training_step` calls, i.e.
micro-batches), and `_generate_and_score_completions` runs its old-log-prob pass when
`gradient_accumulation_steps % generate_every != 0`. `gradient_accumulation_steps` is not part of `generate_every`:
a rollout batch serves `generate_every / gradient_accumulation_steps` optimizer steps, not necessarily a whole number.

healtrl computes the product only in `healtrl.trainers._trl.hooks.generate_every`; the trainer's
`micro_steps_per_rollout_batch`, the old-log-prob condition, the controller cadence check, HEAL's sampler, the dry run
and `train_repeats` call it.
`test_product_computed_once` parses every module of `healtrl/` and fails on any other product of
`steps_per_generation` and `num_iterations` (or a local named `iterations`), however the operands are spelled
(`args.x`, `self.args.x`, a bare name) and in whichever order or chain (`a * b * c`).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[1]
OWNER = (REPO / "healtrl" / "trainers" / "_trl" / "hooks.py", "generate_every")  # (file, function)
CONFIGS = [(spg, ni, gas) for spg in (1, 4) for ni in (1, 2) for gas in (1, 2)]


def _operand_name(node: ast.AST) -> str | None:
    """The identifier an operand names: `x` for `x`, `a.b.x` or `self.args.x`; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _factors(node: ast.AST) -> list[ast.AST]:
    """The operands of a chain of multiplications (`a * b * c` -> [a, b, c])."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def rollout_products(source: str) -> list[tuple[int, str | None]]:
    """(line, enclosing function) of every product of `steps_per_generation` and `num_iterations`/`iterations`."""
    tree = ast.parse(source)
    found: list[tuple[int, str | None]] = []

    def visit(node: ast.AST, function: str | None, inside_product: bool) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            function = node.name
        is_product = isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult)
        if is_product and not inside_product:  # the outermost `*` of a chain: look at all its factors
            names = {_operand_name(factor) for factor in _factors(node)}
            if "steps_per_generation" in names and names & {"num_iterations", "iterations"}:
                found.append((node.lineno, function))
        for child in ast.iter_child_nodes(node):
            visit(child, function, is_product)

    visit(tree, None, False)
    return found


def test_detector_finds_the_spellings():
    """The scan flags the spellings the codebase used before (so a pass below means something)."""
    source = (
        "def f(self, args, steps_per_generation, iterations):\n"
        "    a = self.args.steps_per_generation * self.num_iterations\n"
        "    b = args.num_iterations * args.steps_per_generation / args.gradient_accumulation_steps\n"
        "    c = steps_per_generation * iterations\n"
        "    d = self.num_iterations * 2 * self.args.steps_per_generation\n"
        "    e = args.steps_per_generation * args.gradient_accumulation_steps\n"
    )
    assert rollout_products(source) == [(2, "f"), (3, "f"), (4, "f"), (5, "f")]


def test_product_computed_once():
    """Across `healtrl/`, the product appears once: in `generate_every` of `_trl/hooks.py`."""
    hits = []
    for path in sorted((REPO / "healtrl").rglob("*.py")):
        for line, function in rollout_products(path.read_text(encoding="utf-8")):
            hits.append((path, line, function))
    where = [(path, function) for path, _, function in hits]
    assert where == [OWNER], "steps_per_generation * num_iterations computed outside generate_every: " + ", ".join(
        f"{path.relative_to(REPO)}:{line} ({function})" for path, line, function in hits if (path, function) != OWNER
    )


def test_trl_regenerates_on_the_same_product():
    """TRL 1.16's own rule, read from the installed source: both places TRL computes it use the same product."""
    from trl import GRPOTrainer

    expression = "generate_every = self.args.steps_per_generation * self.num_iterations"
    assert expression in inspect.getsource(GRPOTrainer._prepare_inputs)
    assert "self._step % generate_every == 0" in inspect.getsource(GRPOTrainer._prepare_inputs)
    scoring = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert expression in scoring
    assert "self.args.gradient_accumulation_steps % generate_every != 0" in scoring


@pytest.mark.parametrize(("spg", "ni", "gas"), CONFIGS)
def test_values(spg, ni, gas):
    """The function and every caller that can run without a model give TRL's numbers for each config."""
    from healtrl.cli.run_data import _steps_per_generation_batch
    from healtrl.trainers._control import check_controller_update
    from healtrl.trainers._trl import generate_every
    from healtrl.trainers._trl.generation import GenerationCalls
    from healtrl.trainers._trl.hooks import BoundaryHooks

    expected = {(1, 1): 1, (1, 2): 2, (4, 1): 4, (4, 2): 8}[(spg, ni)]  # micro-batches between TRL's generations
    assert generate_every(spg, ni) == expected

    args = SimpleNamespace(
        steps_per_generation=spg, num_iterations=ni, gradient_accumulation_steps=gas, controller_update="rollout_batch"
    )
    stub_class = type(
        "Stub",
        (),
        {
            "micro_steps_per_rollout_batch": BoundaryHooks.micro_steps_per_rollout_batch,
            "trl_computes_old_logps": GenerationCalls.trl_computes_old_logps,
        },
    )
    trainer = stub_class()
    trainer.args, trainer.num_iterations = args, ni
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = False, False
    assert trainer.micro_steps_per_rollout_batch == expected
    # TRL's old-log-prob pass runs unless every rollout batch ends on an optimizer step boundary.
    assert trainer.trl_computes_old_logps() is (gas % expected != 0)
    assert _steps_per_generation_batch(args) == expected / gas  # optimizer steps per rollout batch
    if expected % gas == 0:
        check_controller_update(args)  # whole optimizer steps per rollout batch: accepted
    else:
        with pytest.raises(ValueError, match=rf"\({spg} \* {ni} = {expected}\) must be a multiple"):
            check_controller_update(args)
