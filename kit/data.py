"""Files the kit ships beside its code: site configs, the batch-script template, the image
recipes, example study files, the pin list, and pyproject.toml + README.md (an image build makes
the kit's wheel).

Their source of truth is the top of the source tree (site-configs/, slurm/, images/, studies/,
constraints.txt, pyproject.toml, README.md); kit/_data/ links to them in a checkout and a built
wheel carries copies
there, so one lookup through the installed package finds them in a checkout, an editable
install and a wheel installed anywhere, never relative to the current directory.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from kit.errors import KitError


def shipped(*parts: str) -> Path:
    """The shipped file or directory kit/_data/<parts>."""
    root = resources.files("kit")
    if not isinstance(root, Path):  # a zipped install: the kit hands these paths to other programs
        raise KitError(
            f"the kit is installed as a zip archive ({root})",
            fix="install the secure-site-kit wheel with pip, which unpacks it",
        )
    return root.joinpath("_data", *parts)
