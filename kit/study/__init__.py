"""Hyperparameter studies of gan3d train: the search space and study file (``space``, ``spec``) and
the strategies that propose what to train next (``search``). The runner builds on these."""

from __future__ import annotations

from kit.errors import KitError
from kit.extras import DISTRIBUTION

EXTRA = "study"


def missing_study_extra(exc: ModuleNotFoundError, what: str) -> KitError:
    """The one-line error for a study needing a module of the study extra (numpy, scikit-learn)."""
    top = (exc.name or "?").split(".")[0]
    return KitError(
        f"{what} needs the Python module {top!r}, which is not installed",
        fix=""
        f"pip install '{DISTRIBUTION}[{EXTRA}]' (offline: install.sh VENV {EXTRA} from the wheelhouse)",
    )
