"""The TRL boundary (issue #15): only `healtrl/trainers/_trl/` touches TRL's (and transformers `Trainer`'s)
private API.

TRL reshapes `GRPOTrainer`'s private methods every release. If every override of them, every read or write of their
private state and every import of a private name sits in one package, a TRL upgrade means reading that one package
against the new release. This test keeps it so: it parses every module of `healtrl/` outside `_trl/` and fails when
one of them

(a) defines a method named like a private attribute of `trl.GRPOTrainer` or `transformers.Trainer` (or of TRL's
    vLLM classes `VLLMGeneration` / `VLLMClient`, whose weight sync `_trl/vllm_sync.py` replaces),
(b) reads or writes such an attribute on any object (`self._metrics`, `trainer._step`),
(c) imports an underscore name from `trl` or `transformers`, or anything from a private module of theirs,
(d) reads or writes an underscore name of a `trl` / `transformers` module or class it imported
    (`trl_utils._ChunkedLogProbFunction`), or
(e) spells such a private attribute as a string for `getattr` / `setattr` / `hasattr` / `delattr`.

Stricter for the method files (the modules of the registered trainers, `method_files()`: `aer.py`, `posadv.py`,
`opefo.py`, `heal.py`, `baselines.py` and the mixins they use): they override no method of
`trl.GRPOTrainer` at all, public or private, but `__init__` (`train`, `log`, `compute_loss`, ...); a method is the
hooks of `EntropyGRPOTrainer` and `TRLBoundary` (the levers, `before_training`, `optimizer_step_end`, ...).

`benchmarks/` is left out: its timing scripts wrap TRL's private methods on purpose, to time TRL itself. Class-body
assignments (`_name = "AER"`, `_paper`, `_tag_names`: the model-card attributes every TRL trainer subclass sets) are
not flagged; reading them on an instance goes through the boundary's `card_name` / `card_paper` / `card_tags`.

The private names are collected from the installed classes (their attributes and the `self._x = ...` assignments in
their source), so a TRL release that adds private state extends the set by itself. healtrl's own private helpers (names
TRL does not use) are not affected.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BOUNDARY = REPO / "healtrl" / "trainers" / "_trl"  # the boundary package
# `benchmarks/` is not scanned: its timing scripts instrument TRL's private methods on purpose (they time TRL itself).
SCANNED = (REPO / "healtrl",)
EXTERNAL = ("trl", "transformers")


def method_files() -> list[Path]:
    """The method files: the modules of the registered trainers and configs (`healtrl.trainers.TRAINERS`) and of the
    classes they derive from, outside the base and the boundary (`tests/test_method_contract.method_files`), so that a
    registered method is checked without being named here."""
    from tests.test_method_contract import method_files as registered_method_files

    return registered_method_files()


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def trl_private_names() -> frozenset[str]:
    """Private (single-underscore) attributes of `trl.GRPOTrainer` and `transformers.Trainer` (and of TRL's
    `VLLMGeneration` / `VLLMClient`): those defined on any class of their MRO that TRL or transformers define, and
    those their methods assign on `self`."""
    import transformers
    import trl

    classes = [trl.GRPOTrainer, transformers.Trainer]
    try:  # TRL's vLLM classes, whose weight sync healtrl replaces on CPU engines (`_trl/vllm_sync.py`)
        from trl.generation.vllm_client import VLLMClient
        from trl.generation.vllm_generation import VLLMGeneration

        classes += [VLLMGeneration, VLLMClient]
    except ImportError:  # pragma: no cover - a TRL build without them
        pass
    names: set[str] = set()
    for cls in classes:
        for klass in cls.__mro__:
            if klass.__module__.split(".")[0] not in EXTERNAL:
                continue
            names.update(name for name in vars(klass) if _private(name))
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
            except (OSError, TypeError):  # no source (a C extension or a class built at run time)
                continue
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                    and _private(node.attr)
                ):
                    names.add(node.attr)
    return frozenset(names)


def _private_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in EXTERNAL and any(_private(part) for part in parts[1:])


def _external_names(tree: ast.AST) -> set[str]:
    """Names a module binds to `trl` / `transformers` objects or modules (`import trl.trainer.utils as u`,
    `from trl import GRPOTrainer`)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in EXTERNAL:
                    names.add(alias.asname or alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in EXTERNAL:
                names.update(alias.asname or alias.name for alias in node.names)
    return names


def scan_source(source: str, filename: str, private_names: frozenset[str]) -> list[str]:
    """Every use of TRL's private API in one module's source, as `file:line: what`."""
    found = []
    tree = ast.parse(source, filename=filename)
    external = _external_names(tree)
    methods = {
        id(item)
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))
    }
    for node in ast.walk(tree):
        where = f"{filename}:{getattr(node, 'lineno', 0)}"
        if id(node) in methods and node.name in private_names:
            found.append(f"{where}: defines {node.name}, a private method of TRL's GRPOTrainer / transformers' Trainer")
        elif (
            isinstance(node, ast.Attribute)
            and _private(node.attr)
            and isinstance(node.value, ast.Name)
            and node.value.id in external
        ):
            found.append(f"{where}: uses {node.value.id}.{node.attr}, a private name of trl / transformers")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in private_names
        ):
            found.append(
                f"{where}: {node.func.id}(..., {node.args[1].value!r}), a private attribute of TRL / transformers"
            )
        elif isinstance(node, ast.Attribute) and node.attr in private_names:
            verb = "writes" if isinstance(node.ctx, (ast.Store, ast.Del)) else "reads"
            found.append(
                f"{where}: {verb} .{node.attr}, a private attribute of TRL's GRPOTrainer / transformers' Trainer"
            )
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] not in EXTERNAL:
                continue
            if _private_module(node.module):
                found.append(f"{where}: imports from {node.module}, a private module")
            for alias in node.names:
                if _private(alias.name):
                    found.append(f"{where}: imports {alias.name} from {node.module}, a private name")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _private_module(alias.name):
                    found.append(f"{where}: imports {alias.name}, a private module")
    return found


def scan(paths, private_names: frozenset[str], exclude=(BOUNDARY,)) -> list[str]:
    """`scan_source` over every `.py` file under `paths` (files or folders), except `exclude` (files or folders)."""
    found = []
    excluded = {Path(p).resolve() for p in exclude}
    for root in map(Path, paths):
        files = [root] if root.is_file() else sorted(root.rglob("*.py"))
        for path in files:
            if path.resolve() in excluded or excluded & set(path.resolve().parents):
                continue
            found += scan_source(path.read_text(encoding="utf-8"), str(path.relative_to(root.parent)), private_names)
    return found


@pytest.fixture(scope="module")
def private_names():
    return trl_private_names()


def test_private_names_come_from_the_installed_classes(private_names):
    # Methods, state assigned in TRL's __init__, and transformers' own: the names this test exists for.
    for name in (
        "_compute_loss",
        "_generate_and_score_completions",
        "_get_per_token_logps_and_entropies",
        "_metrics",
        "_step",
        "_buffered_inputs",
        "_save_checkpoint",
        "_load_optimizer_and_scheduler",
        "_iter_named_params",
    ):
        assert name in private_names
    assert "__init__" not in private_names and "train" not in private_names


def test_only_the_boundary_touches_trl_private_api(private_names):
    assert BOUNDARY.is_dir(), "healtrl/trainers/_trl/, the TRL boundary, is missing"
    found = scan(SCANNED, private_names)
    assert not found, (
        "TRL's private API used outside healtrl/trainers/_trl/; move each use behind the boundary (a public hook or "
        "accessor of TRLBoundary):\n" + "\n".join(found)
    )


def test_the_boundary_follows_one_trl_release(private_names):
    """The boundary is where the private API is used, and that API is the one of a single TRL minor release: the range
    `healtrl.utils.compat` enforces at import, the one pyproject.toml pins, and the installed TRL's."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    import trl

    from healtrl.utils.compat import SUPPORTED_TRL, SUPPORTED_TRL_SPEC

    sources = {path.name: path.read_text(encoding="utf-8") for path in sorted(BOUNDARY.glob("*.py"))}
    assert any(scan_source(text, name, private_names) for name, text in sources.items()), (
        "the boundary uses no private API: the scan would be vacuous"
    )
    low, high = SUPPORTED_TRL
    assert low.micro == 0 and high == Version(f"{low.major}.{low.minor + 1}.0"), SUPPORTED_TRL
    spec = SpecifierSet(SUPPORTED_TRL_SPEC)
    assert low in spec and Version(f"{low.major}.{low.minor}.99") in spec and high not in spec
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [Requirement(d).specifier for d in dependencies if Requirement(d).name == "trl"]
    assert pins == [spec], f"pyproject.toml pins trl {pins}, healtrl.utils.compat enforces {SUPPORTED_TRL_SPEC}"
    assert low <= Version(Version(trl.__version__).base_version) < high, trl.__version__


def test_scanner_finds_planted_violations(tmp_path, private_names):
    planted = {
        "overrides.py": "class T:\n    def _compute_loss(self, model, inputs):\n        return 0\n",
        "reads.py": "def f(trainer):\n    return trainer._metrics['train']\n",
        "writes.py": "def f(self):\n    self._step = 0\n",
        "imports_name.py": "from trl.trainer.base_trainer import _BaseTrainer\n",
        "imports_module.py": "from transformers.models._x import helper\n",
        "imports_plain.py": "import trl._private\n",
        "module_attr.py": "import trl.trainer.utils as u\n\nu._ChunkedLogProbFunction = None\n",
        "getattr.py": "def f(trainer):\n    return getattr(trainer, '_dist', None)\n",
        "boundary.py": "def f(self):\n    return self._metrics\n",
    }
    for name, source in planted.items():
        (tmp_path / name).write_text(source)
    found = scan([tmp_path], private_names, exclude=[tmp_path / "boundary.py"])
    for name in planted:
        hits = [line for line in found if line.startswith(f"{tmp_path.name}/{name}:")]
        assert bool(hits) == (name != "boundary.py"), (name, found)
    assert any("defines _compute_loss" in line for line in found)
    assert any("writes ._step" in line for line in found)


def test_own_private_helpers_pass(tmp_path, private_names):
    (tmp_path / "ok.py").write_text(
        "from trl import GRPOTrainer\nfrom .._compat import require\n"
        "class T(GRPOTrainer):\n    def _healtrl_helper(self):\n        return self._guard_state\n"
    )
    # A module-level function named like a TRL method is not an override.
    (tmp_path / "helper.py").write_text("def _tokenize_prompts(tokenizer, prompts):\n    return prompts\n")
    assert scan([tmp_path], private_names) == []


# ---------------------------------------------------------------------------------------------------------------
# Method files override no TRL method, public or private, but __init__
# ---------------------------------------------------------------------------------------------------------------
def trl_method_names() -> frozenset[str]:
    """Every attribute of `trl.GRPOTrainer` (its own and inherited, public and private), `__init__` aside."""
    import trl

    return frozenset(dir(trl.GRPOTrainer)) - {"__init__"}


def trl_overrides(source: str, filename: str, names: frozenset[str]) -> list[str]:
    """Every method of a class in `source` named like an attribute in `names`, as `file:line: Class.method`."""
    return [
        f"{filename}:{item.lineno}: {node.name}.{item.name} overrides GRPOTrainer.{item.name}"
        for node in ast.walk(ast.parse(source, filename=filename))
        if isinstance(node, ast.ClassDef)
        for item in node.body
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name in names
    ]


def test_method_files_override_no_trl_method():
    names = trl_method_names()
    assert {"train", "log", "compute_loss", "_compute_loss", "save_model"} <= names and "__init__" not in names
    found = []
    from healtrl.trainers import TRAINERS

    files = method_files()
    registered = {Path(inspect.getsourcefile(trainer)).resolve() for trainer, _ in TRAINERS.values()}
    assert registered <= {path.resolve() for path in files}, "a registered trainer's module is not scanned"
    for path in files:
        found += trl_overrides(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)), names)
    assert not found, (
        "a method file overrides a method of trl.GRPOTrainer; use a hook of EntropyGRPOTrainer or TRLBoundary "
        "(the levers, before_training, optimizer_step_end, rollout_columns, ...) or add one there:\n" + "\n".join(found)
    )


def test_override_check_finds_planted_violations():
    source = textwrap.dedent(
        """\
        class MyConfig:
            def __post_init__(self):
                pass

        class MyTrainer(EntropyGRPOTrainer):
            def __init__(self, model, **kwargs):
                super().__init__(model, **kwargs)

            def before_training(self, resume_checkpoint):
                pass

            def extra_loss(self, batch):
                return None

            def train(self, *args, **kwargs):
                return super().train(*args, **kwargs)

            @property
            def is_world_process_zero(self):
                return True

            def _prepare_inputs(self, inputs):
                return inputs
        """
    )
    found = trl_overrides(source, "planted.py", trl_method_names())
    assert [line.split(": ", 1)[1] for line in found] == [
        "MyTrainer.train overrides GRPOTrainer.train",
        "MyTrainer.is_world_process_zero overrides GRPOTrainer.is_world_process_zero",
        "MyTrainer._prepare_inputs overrides GRPOTrainer._prepare_inputs",
    ]
