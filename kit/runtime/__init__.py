"""Container runtimes: what starts each rank in the image. One module per runtime, registered by
the name a site's `container.runtime` gives (the model ReFrame's container platforms follow): the
launcher and the pair stay the kit's; a runtime turns the pair's binds and environment into its
own words, says what it needs on this machine, and what a batch script sets for it."""

from __future__ import annotations

from kit.runtime.apptainer import APPTAINER
from kit.runtime.base import Runtime, shell_path
from kit.runtime.charliecloud import CHARLIECLOUD
from kit.runtime.udocker import UDOCKER
from kit.site.model import RUNTIMES as _NAMES
from kit.site.model import Site

REGISTRY: dict[str, Runtime] = {r.name: r for r in (CHARLIECLOUD, UDOCKER, APPTAINER)}
REGISTRY["singularity"] = APPTAINER  # Apptainer's former name: one runtime
assert tuple(REGISTRY) == _NAMES, (
    "kit/site/model.py RUNTIMES and the registry must name the same runtimes"
)


def runtime_of(site: Site) -> Runtime:
    """The runtime the site's container.runtime names (the schema admits only registered ones)."""
    return REGISTRY[site.container.runtime]


__all__ = ["REGISTRY", "Runtime", "runtime_of", "shell_path"]
