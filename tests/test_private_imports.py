"""No private name is imported across packages (issue #41 item 3).

A name is private when a part of its dotted path starts with `_` (`healtrl._compat`, `healtrl.tasks._keys.stem_key`,
`healtrl.cli.config._split_argv`; dunders aside). An import of one crosses a package boundary when the importing
module's package is neither the package that holds the private part (a private module of `healtrl.tasks` used inside
`healtrl.tasks`, a private function of `cli/config.py` used in `cli/train.py`) nor inside the private package itself
(`healtrl/trainers/_trl/` importing its own modules). Imports inside functions count too. The scan reads `healtrl/`'s
sources (AST), imports nothing.

The count was 55 at its first scan (2026-11-28) and is 0 since the root was grouped into packages with public
module names (`healtrl.utils`, `healtrl.evaluation`, ...). A new crossing fails the test: use a public name, or move
the name where its users are.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "healtrl"


def _module_and_package(path: Path) -> tuple[str, str]:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        name = ".".join(parts[:-1])
        return name, name
    name = ".".join(parts)
    return name, name.rsplit(".", 1)[0]


def crossings(source: str, package: str) -> list[str]:
    """The private names `source` (a module of `package`) imports across a package boundary (rule: the docstring)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [f"{target}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for full in names:
            parts = full.split(".")
            if parts[0] != "healtrl":
                continue
            private = [i for i, part in enumerate(parts) if part.startswith("_") and not part.startswith("__")]
            if not private:
                continue
            holder = ".".join(parts[: private[0]])  # the module or package that holds the private part
            owner = holder if (ROOT / Path(*holder.split("."))).is_dir() else holder.rsplit(".", 1)[0]
            inside = ".".join(parts[: private[0] + 1])  # the private module or package itself
            if package != owner and package != inside and not package.startswith(inside + "."):
                found.append(full)
    return found


def scan() -> list[tuple[str, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        _, package = _module_and_package(path)
        out += [(str(path.relative_to(ROOT)), name) for name in crossings(path.read_text(encoding="utf-8"), package)]
    return out


def test_the_rule_on_planted_imports():
    source = (
        "from healtrl._compat import is_available\n"  # a root-private module from a subpackage: crosses
        "from .config import _split_argv\n"  # a sibling module's private name: same package
        "from healtrl.trainers._trl.hooks import generate_every\n"  # another package's private subpackage: crosses
        "def f():\n    from healtrl.tasks._keys import stem_key\n"  # inside a function: counted too
        "from healtrl.kernels import fused_logprob_entropy\n"  # public
    )
    assert crossings(source, "healtrl.cli") == [
        "healtrl._compat.is_available",
        "healtrl.trainers._trl.hooks.generate_every",
        "healtrl.tasks._keys.stem_key",
    ]
    inner = "from .batches import LossBatch\nfrom healtrl.trainers._trl.hooks import generate_every\n"
    assert crossings(inner, "healtrl.trainers._trl") == []  # the private package's own modules


def test_no_private_import_crosses_a_package():
    found = scan()
    assert found == [], "private names imported across packages:\n" + "\n".join(f"  {p}: {n}" for p, n in found)
