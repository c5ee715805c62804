"""Public names a package imports on first use (PEP 562).

The front doors ``django_rivet.actors`` and ``django_rivet.workflows``
name their clients' functions in ``__all__`` but import the clients only
when one is used: a project's ``actors.py`` or ``workflows.py`` imports the
package before Django's models are ready.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["lazy_from"]


def lazy_from(
    module: str, names: Collection[str], namespace: dict[str, Any]
) -> Callable[[str], Any]:
    """Return a module ``__getattr__`` importing ``names`` from ``module``.

    ``namespace`` is the package's ``globals()``: a name found is stored
    there, so the next lookup does not come back here. Names bound at import
    never get here, so ``names`` may be the package's whole ``__all__``.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in names:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
