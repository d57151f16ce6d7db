"""The subject packages' lazy re-exports (`healtrl.utils.lazy.lazy_exports`): every exported name is the object its
module defines, importing one module of a package imports no other, and an unknown name is an AttributeError."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = ("healtrl.evaluation", "healtrl.selection", "healtrl.recipes", "healtrl.views")


@pytest.mark.parametrize("name", PACKAGES)
def test_every_export_is_its_modules_object(name):
    package = importlib.import_module(name)
    assert package.__all__ == sorted(package._EXPORTS)
    for export, module in package._EXPORTS.items():
        source = importlib.import_module(f"{name}.{module}")
        assert getattr(package, export) is getattr(source, export), f"{name}.{export} is not {name}.{module}.{export}"
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="has no attribute 'not_a_name'"):
        package.not_a_name  # noqa: B018


def test_one_module_imports_no_sibling():
    """The trainers import `healtrl.views.entropy`; that must not import `healtrl.views.inspection` (which samples
    with the evaluation's machinery, a layer above the trainers), nor `healtrl.views.curves`."""
    code = (
        "import sys, healtrl.views.entropy, healtrl.recipes.metrics\n"
        "print(sorted(m for m in sys.modules if m.startswith(('healtrl.views.', 'healtrl.recipes.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['healtrl.recipes.metrics', 'healtrl.views.entropy']"


def test_package_import_binds_on_first_access():
    code = (
        "import sys, healtrl.evaluation as e\n"
        "before = 'healtrl.evaluation.best_checkpoint' in sys.modules\n"
        "e.choose_best\n"
        "print(before, 'healtrl.evaluation.best_checkpoint' in sys.modules, 'choose_best' in vars(e))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "True", "True"]
