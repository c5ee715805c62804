"""Deprecated alias of :mod:`django_rivet.engine` (renamed in 0.2).

Import the decorator, the errors and the values from
:mod:`django_rivet.workflows` (the front door users write workflows
against) and the engine's own names (drivers, ``run_workflow``) from
:mod:`django_rivet.engine`. This alias, submodules included
(``django_rivet.workflow.errors``), stays for one release and warns once
per process when it is imported.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType
from typing import Any

from ..engine import *  # noqa: F403 (the alias re-exports the engine's names)
from ..engine import __all__ as __all__  # noqa: F401

_OLD = __name__ + "."
_NEW = "django_rivet.engine."

warnings.warn(
    "django_rivet.workflow was renamed django_rivet.engine; write workflows "
    "with the names of django_rivet.workflows (from django_rivet.workflows "
    "import workflow). The old name goes in the next release.",
    DeprecationWarning,
    stacklevel=2,
)


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serve ``django_rivet.workflow.<module>`` as the engine's module.

    The same module object, not a second copy of the file: classes stay
    identical (``except django_rivet.workflow.errors.StepFailedError``
    catches what the engine raises).
    """

    def find_spec(
        self, fullname: str, path: Any = None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(_OLD):
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(_NEW + spec.name[len(_OLD) :])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the engine's module ran when it was imported."""


if not any(isinstance(finder, _Alias) for finder in sys.meta_path):
    sys.meta_path.insert(0, _Alias())
