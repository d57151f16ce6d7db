"""The method contract (issue #41, item 1): `healtrl/trainers/contract.py` lists, once, the hooks a method trainer may
implement and the accessors it may read; the method files use nothing else of the base trainer and the TRL boundary.

- `test_contract_matches_the_classes`: every hook and accessor exists on the class the contract names, with the
  parameters it lists (a property where it lists none); no name is listed twice or starts with `_`.
- `test_every_public_name_of_the_boundary_and_base_is_in_the_contract`: a public method or attribute added to the
  boundary, the base trainer or the mixins without a contract entry fails (the list stays the one list).
- `test_method_files_keep_the_contract`: the method files (the modules of the registered trainers and configs, and of
  the classes they derive from, outside the base and the boundary; derived from `TRAINERS`, so a new method is
  scanned without being named here) are parsed; a `_`-prefixed attribute or name that belongs to the base, the
  boundary, TRL or transformers, or that the file does not define itself, fails, as does an import from `_trl/`, and
  a method of a trainer (config) class that overrides one of a class after it in the MRO without being a contract hook
  (config hook), or a class attribute of the base set without being a declaration.
- `test_boundary_imports_only_functional_and_kernels`: every module under `_trl/` imports nothing of healtrl outside
  `_trl/` but `healtrl.functional` and `healtrl.kernels` (imports inside functions included).
- `test_architecture_states_the_contract`: ARCHITECTURE.md's hook table names exactly the contract's hooks, its count
  is theirs, and it names every accessor.

Each scanner is also run on planted violations, so that a pass means something.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TRAINERS_DIR = REPO / "healtrl" / "trainers"
BOUNDARY_DIR = TRAINERS_DIR / "_trl"
#: Modules of `healtrl/trainers/` that make up the base trainer, its registry and its contract: not method files.
BASE_SIDE = ("__init__.py", "base.py", "contract.py", "_card.py", "_guard.py", "_inspect_hooks.py", "_papers.py")
ALLOWED_OUTSIDE_BOUNDARY = ("healtrl.functional", "healtrl.kernels")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _dunder(name: str) -> bool:
    return name.startswith("__") and name.endswith("__")


def _contract():
    from healtrl.trainers import contract

    return contract


def _owners() -> dict[str, type]:
    from healtrl.trainers._control import EntropyControlMixin, RandomStreamMixin
    from healtrl.trainers._trl.boundary import TRLBoundary
    from healtrl.trainers._trl.checkpoint import CheckpointCalls
    from healtrl.trainers._trl.generation import GenerationCalls
    from healtrl.trainers._trl.hooks import BoundaryHooks
    from healtrl.trainers._trl.lm_head import LMHeadForwards
    from healtrl.trainers._trl.loss import LossCalls
    from healtrl.trainers.base import EntropyGRPOConfig, EntropyGRPOTrainer

    classes = (
        BoundaryHooks,
        LMHeadForwards,
        LossCalls,
        GenerationCalls,
        CheckpointCalls,
        TRLBoundary,
        EntropyGRPOTrainer,
        EntropyGRPOConfig,
        EntropyControlMixin,
        RandomStreamMixin,
    )
    return {cls.__name__: cls for cls in classes}


# ---------------------------------------------------------------------------------------------------------------
# The contract and the classes
# ---------------------------------------------------------------------------------------------------------------
def _parameters(member) -> tuple[str, ...]:
    function = member.__func__ if isinstance(member, classmethod | staticmethod) else member
    names = tuple(inspect.signature(function).parameters)
    return names[1:] if names and names[0] in ("self", "cls") else names


def test_contract_matches_the_classes():
    contract = _contract()
    owners = _owners()
    entries = [*contract.HOOKS, *contract.CONFIG_HOOKS, *contract.ACCESSORS]
    names = [entry.name for entry in entries] + [d.name for d in contract.DECLARATIONS]
    assert len(names) == len(set(names)), f"a name is listed twice: {sorted(n for n in names if names.count(n) > 1)}"
    assert not [name for name in names if name.startswith("_")], "the contract lists public names only"
    assert len(contract.HOOKS) == 16 and contract.hook_names()[0] == "shape_advantages"
    wrong = []
    for entry in entries:
        owner = owners[entry.owner]
        member = vars(owner).get(entry.name)
        if member is None:
            wrong.append(f"{entry.owner}.{entry.name}: not defined there")
        elif entry.arguments is None:
            if not isinstance(member, property):
                wrong.append(f"{entry.owner}.{entry.name}: listed as a property, is a {type(member).__name__}")
        elif isinstance(member, property) or _parameters(member) != entry.arguments:
            shown = "a property" if isinstance(member, property) else _parameters(member)
            wrong.append(f"{entry.owner}.{entry.name}: parameters {shown}, contract {entry.arguments}")
    from healtrl.trainers.base import EntropyGRPOTrainer

    wrong += [
        f"{d.name}: not an attribute of EntropyGRPOTrainer"
        for d in contract.DECLARATIONS
        if not hasattr(EntropyGRPOTrainer, d.name)
    ]
    assert not wrong, "contract.py disagrees with the classes:\n" + "\n".join(wrong)


def test_every_public_name_of_the_boundary_and_base_is_in_the_contract():
    from trl import GRPOTrainer

    contract = _contract()
    listed = {e.name for e in (*contract.HOOKS, *contract.ACCESSORS, *contract.CONFIG_HOOKS)}
    listed |= {d.name for d in contract.DECLARATIONS}
    unlisted = []
    for name, cls in _owners().items():
        if name == "EntropyGRPOConfig":
            continue  # a config's public names are its fields
        for attr in vars(cls):
            if _private(attr) or _dunder(attr) or attr in listed:
                continue
            if hasattr(GRPOTrainer, attr):  # TRL's or transformers' own (`train`): not healtrl's to list
                continue
            unlisted.append(f"{name}.{attr}")
    assert not unlisted, (
        "public names of the boundary, the base trainer or the mixins missing from healtrl/trainers/contract.py "
        "(add each to HOOKS, ACCESSORS or DECLARATIONS, or make it private): " + ", ".join(unlisted)
    )


# ---------------------------------------------------------------------------------------------------------------
# The method files
# ---------------------------------------------------------------------------------------------------------------
def method_classes() -> tuple[set[str], set[str]]:
    """(trainer-side, config-side) `module:qualname` of the classes the registered trainers and configs derive from
    that live in a method file."""
    from healtrl.trainers import TRAINERS

    trainers, configs = set(), set()
    for trainer, config in TRAINERS.values():
        for side, root in ((trainers, trainer), (configs, config)):
            for cls in root.__mro__:
                if not cls.__module__.startswith("healtrl.trainers."):
                    continue
                path = Path(inspect.getsourcefile(cls)).resolve()
                if path.parent == TRAINERS_DIR and path.name not in BASE_SIDE:
                    side.add(f"{path.name}:{cls.__qualname__}")
    return trainers, configs


def method_files() -> list[Path]:
    trainers, configs = method_classes()
    return sorted({TRAINERS_DIR / key.split(":")[0] for key in trainers | configs})


def base_private_names() -> frozenset[str]:
    """`_`-prefixed names of the base trainer and the boundary: those of every class of `EntropyGRPOTrainer`'s MRO
    (TRL's and transformers' included), those assigned on `self` in the base-side modules and the boundary, and TRL's
    and transformers' (`test_trl_boundary.trl_private_names`)."""
    from healtrl.trainers.base import EntropyGRPOTrainer
    from tests.test_trl_boundary import trl_private_names

    names = {name for name in dir(EntropyGRPOTrainer) if _private(name)}
    paths = [*BOUNDARY_DIR.glob("*.py"), *(TRAINERS_DIR / name for name in BASE_SIDE)]
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) and _private(node.attr):
                names.add(node.attr)
    return frozenset(names | trl_private_names())


def _defined_names(tree: ast.AST) -> set[str]:
    """Names a module defines: functions, classes, assignment targets (plain names and `self.x` attributes)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
    return names


def _imports_boundary(node: ast.ImportFrom | ast.Import, package: str) -> bool:
    """Whether an import in a module of `package` (healtrl.trainers) names the boundary package `_trl`."""
    if isinstance(node, ast.Import):
        return any(alias.name.startswith("healtrl.trainers._trl") for alias in node.names)
    module = _absolute(node, package)
    if module == package:  # `from . import _trl`
        return any(alias.name == "_trl" for alias in node.names)
    return module == "healtrl.trainers._trl" or module.startswith("healtrl.trainers._trl.")


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if node.level == 0:
        return node.module or ""
    parts = package.split(".")
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def scan_method_file(
    source: str,
    filename: str,
    base_private: frozenset[str],
    classes: dict[str, dict[str, set[str]]],
    hooks: set[str],
    config_hooks: set[str],
    declarations: set[str],
) -> list[str]:
    """Every breach of the contract in one method file, as `file:line: what`.

    `classes` maps a class name of this file to {"side": {"trainer"} or {"config"}, "inherited": the names its bases
    define (methods and class attributes of the classes after it in its MRO)}.
    """
    tree = ast.parse(source, filename=filename)
    own = _defined_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            if node.attr in base_private:
                found.append(f"{filename}:{node.lineno}: `.{node.attr}` is the base's or the boundary's (or TRL's)")
            elif node.attr not in own:
                found.append(f"{filename}:{node.lineno}: `.{node.attr}` is not defined in this file")
        elif isinstance(node, ast.Name) and _private(node.id) and node.id not in own:
            found.append(f"{filename}:{node.lineno}: `{node.id}` is not defined in this file")
        elif isinstance(node, ast.ImportFrom | ast.Import):
            if _imports_boundary(node, "healtrl.trainers"):
                found.append(f"{filename}:{node.lineno}: imports from the TRL boundary `_trl/` (use contract.py)")
            for alias in node.names:
                if (
                    isinstance(node, ast.ImportFrom)
                    and _private(alias.name)
                    and _absolute(node, "healtrl.trainers")
                    in (
                        "healtrl.trainers.base",
                        "healtrl.trainers.contract",
                    )
                ):
                    found.append(f"{filename}:{node.lineno}: imports the private `{alias.name}` of the base")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in base_private:
            found.append(f"{filename}:{node.lineno}: defines `{node.name}`, a name of the base or the boundary")
    for node in tree.body:
        if not isinstance(node, ast.ClassDef) or node.name not in classes:
            continue
        side, inherited = classes[node.name]["side"], classes[node.name]["inherited"]
        allowed = hooks if "trainer" in side else config_hooks
        kind = "hook" if "trainer" in side else "config hook"
        for item in node.body:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                if not _dunder(item.name) and item.name in inherited and item.name not in allowed:
                    found.append(
                        f"{filename}:{item.lineno}: {node.name}.{item.name} overrides a method of its bases that is "
                        f"not a contract {kind}"
                    )
            elif isinstance(item, ast.Assign | ast.AnnAssign) and "trainer" in side:
                targets = item.targets if isinstance(item, ast.Assign) else [item.target]
                for target in targets:
                    if isinstance(target, ast.Name) and target.id in inherited and target.id not in declarations:
                        found.append(
                            f"{filename}:{item.lineno}: {node.name}.{target.id} sets an attribute of its bases that "
                            "is not a contract declaration"
                        )
        if "trainer" in side:
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Attribute)
                    and isinstance(sub.ctx, ast.Store)
                    and isinstance(sub.value, ast.Name)
                    and sub.value.id == "self"
                    and not _private(sub.attr)
                    and sub.attr in inherited
                    and sub.attr not in declarations
                ):
                    found.append(
                        f"{filename}:{sub.lineno}: {node.name} sets `self.{sub.attr}`, an attribute of its bases that "
                        "is not a contract declaration"
                    )
    return found


def _class_table() -> dict[str, dict[str, dict[str, set[str]]]]:
    """file name -> class name -> {"side", "inherited"} for the classes of `method_classes`."""
    import importlib

    trainers, configs = method_classes()
    table: dict[str, dict[str, dict[str, set[str]]]] = {}
    for key in sorted(trainers | configs):
        filename, qualname = key.split(":")
        module = importlib.import_module(f"healtrl.trainers.{filename[:-3]}")
        cls = getattr(module, qualname)
        inherited = set()
        for base in cls.__mro__[1:]:
            inherited.update(vars(base))
        entry = table.setdefault(filename, {}).setdefault(qualname, {"side": set(), "inherited": set()})
        entry["side"].add("trainer" if key in trainers else "config")
        entry["inherited"] |= inherited
    return table


def _scan_args():
    contract = _contract()
    return (
        base_private_names(),
        {h.name for h in contract.HOOKS},
        {h.name for h in contract.CONFIG_HOOKS},
        {d.name for d in contract.DECLARATIONS},
    )


def test_method_files_are_derived_from_the_registry():
    names = {path.name for path in method_files()}
    assert {"aer.py", "posadv.py", "opefo.py", "heal.py", "baselines.py"} <= names
    assert {"_control.py", "_general_data.py"} <= names  # the mixins and the shared config piece
    assert not names & set(BASE_SIDE)


def test_method_files_keep_the_contract():
    base_private, hooks, config_hooks, declarations = _scan_args()
    table = _class_table()
    found = []
    for path in method_files():
        found += scan_method_file(
            path.read_text(encoding="utf-8"),
            str(path.relative_to(REPO)),
            base_private,
            table.get(path.name, {}),
            hooks,
            config_hooks,
            declarations,
        )
    assert not found, (
        "method files use the base trainer or the TRL boundary outside the contract (healtrl/trainers/contract.py); "
        "use a listed hook or accessor, or add a public one to the contract:\n" + "\n".join(found)
    )


def test_method_scan_finds_planted_violations():
    base_private, hooks, config_hooks, declarations = _scan_args()
    source = textwrap.dedent(
        """\
        from ._trl import generate_every
        from .base import EntropyGRPOTrainer, _CheckpointFiles

        class MyConfig(EntropyGRPOConfig):
            def on_policy_inert(self):
                return []

            def to_dict(self):
                return {}

        class MyTrainer(EntropyGRPOTrainer):
            config_class = MyConfig
            log_metric = None

            def __init__(self, model, **kwargs):
                super().__init__(model, **kwargs)
                self._own = 0
                self.defer_trl_entropy = True
                self.mode = "train"

            def shape_advantages(self, advantages, batch):
                return advantages * self._own * self._generate_every

            def step_sums(self, key, local):
                return None

            def _compute_loss(self, model, inputs):
                return self._metrics

            def my_helper(self):
                return self._not_defined_here
        """
    )
    inherited_trainer = {"shape_advantages", "step_sums", "log_metric", "config_class", "defer_trl_entropy", "mode"}
    classes = {
        "MyConfig": {"side": {"config"}, "inherited": {"on_policy_inert", "to_dict"}},
        "MyTrainer": {"side": {"trainer"}, "inherited": inherited_trainer},
    }
    found = scan_method_file(source, "planted.py", base_private, classes, hooks, config_hooks, declarations)
    expected = [
        "planted.py:1: imports from the TRL boundary",
        "planted.py:2: imports the private `_CheckpointFiles`",
        "MyConfig.to_dict overrides",
        "MyTrainer.log_metric sets an attribute",
        "MyTrainer sets `self.mode`",
        "`._generate_every` is not defined in this file",
        "MyTrainer.step_sums overrides",
        "defines `_compute_loss`",
        "`._metrics` is the base's",
        "`._not_defined_here` is not defined in this file",
    ]
    missing = [text for text in expected if not any(text in line for line in found)]
    assert not missing, f"the scan missed {missing}; it found:\n" + "\n".join(found)
    clean = [line for line in found if any(ok in line for ok in ("_own", "on_policy_inert", "shape_advantages"))]
    assert not clean, f"the scan flagged allowed uses: {clean}"
    assert not [line for line in found if "defer_trl_entropy" in line or "config_class" in line]


# ---------------------------------------------------------------------------------------------------------------
# The boundary's imports
# ---------------------------------------------------------------------------------------------------------------
def boundary_import_breaches(source: str, filename: str, package: str) -> list[str]:
    """Imports of healtrl modules outside `healtrl.trainers._trl`, `healtrl.functional` and `healtrl.kernels`."""
    found = []
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node, package)
            # `from .. import x` may import a module x: judge `package.x` then.
            modules = [f"{module}.{alias.name}" for alias in node.names] if node.level and not node.module else [module]
        else:
            continue
        for module in modules:
            if module.split(".")[0] != "healtrl":
                continue
            inside = module == "healtrl.trainers._trl" or module.startswith("healtrl.trainers._trl.")
            allowed = any(module == ok or module.startswith(ok + ".") for ok in ALLOWED_OUTSIDE_BOUNDARY)
            if not (inside or allowed):
                found.append(f"{filename}:{node.lineno}: imports {module}")
    return found


def test_boundary_imports_only_functional_and_kernels():
    paths = sorted(BOUNDARY_DIR.rglob("*.py"))
    assert len(paths) >= 9
    found = []
    for path in paths:
        package = "healtrl.trainers._trl" + "".join(f".{part}" for part in path.parent.relative_to(BOUNDARY_DIR).parts)
        found += boundary_import_breaches(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)), package)
    assert not found, (
        "healtrl/trainers/_trl/ imports healtrl modules other than healtrl.functional and healtrl.kernels; move what "
        "it needs inside _trl/ or have the base trainer pass it in (BoundaryHooks):\n" + "\n".join(found)
    )


def test_boundary_import_scan_finds_planted_violations():
    source = textwrap.dedent(
        """\
        from ...kernels import fused_logprob_entropy
        from ...functional.aer import sequence_entropies
        from .hooks import BoundaryHooks
        from .. import _generation_stats
        from ...utils.compat import check_report_to

        def save():
            from ...checkpoints import _fsync_dir
            import healtrl.data
        """
    )
    found = boundary_import_breaches(source, "planted.py", "healtrl.trainers._trl")
    assert found == [
        "planted.py:4: imports healtrl.trainers._generation_stats",
        "planted.py:5: imports healtrl.utils.compat",
        "planted.py:8: imports healtrl.checkpoints",
        "planted.py:9: imports healtrl.data",
    ]


# ---------------------------------------------------------------------------------------------------------------
# ARCHITECTURE.md
# ---------------------------------------------------------------------------------------------------------------
def _contract_section() -> str:
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    match = re.search(r"^## The method contract\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert match, "ARCHITECTURE.md has no '## The method contract' section"
    return match.group(1)


def architecture_hooks(section: str) -> list[str]:
    """The hook names of the first table of the section: the first column's `name(...)` or `name`."""
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [re.match(r"\| `([a-z_]+)", row).group(1) for row in rows if re.match(r"\| `([a-z_]+)", row)]


def test_architecture_states_the_contract():
    contract = _contract()
    section = _contract_section()
    hooks_table = section.split("### Hooks", 1)[1].split("###", 1)[0]
    assert architecture_hooks(hooks_table) == list(contract.hook_names())
    count = re.search(r"(\d+) hooks", section)
    assert count and int(count.group(1)) == len(contract.HOOKS), "the number of hooks ARCHITECTURE.md states"
    accessors_part = section.split("### Accessors", 1)[1].split("###", 1)[0]
    missing = [a.name for a in contract.ACCESSORS if f"`{a.name}" not in accessors_part]
    assert not missing, f"accessors missing from ARCHITECTURE.md: {missing}"
    missing = [d.name for d in (*contract.DECLARATIONS, *contract.CONFIG_HOOKS) if f"`{d.name}" not in section]
    assert not missing, f"declarations and config hooks missing from ARCHITECTURE.md: {missing}"


@pytest.mark.parametrize(
    ("table", "expected"),
    [
        (
            "| `shape_advantages(advantages, batch)` | x |\n| `needs_power_sums` | y |",
            ["shape_advantages", "needs_power_sums"],
        ),
        ("| hook | default |\n|---|---|\n| `extra_loss(batch)` | None |", ["extra_loss"]),
    ],
)
def test_architecture_table_reader(table, expected):
    assert architecture_hooks(table) == expected
