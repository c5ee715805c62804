"""System checks of django-rivet (documented in docs/checks.md), one module per concern.

Importing the package registers every check (``apps.py`` does it in
``ready()``). Messages are module constants, re-exported here, so tests
compare them by equality: ``django_rivet.checks.E401``.
"""

from __future__ import annotations

from .background import *  # noqa: F403
from .database import *  # noqa: F403
from .definitions import *  # noqa: F403
from .observability import *  # noqa: F403
from .retention import *  # noqa: F403
from .runtime import *  # noqa: F403
from .settings import *  # noqa: F403
from .tasks import *  # noqa: F403
from .transport import *  # noqa: F403
from .typed import *  # noqa: F403
