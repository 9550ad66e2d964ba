"""Site configs: typed, schema-checked descriptions of a machine (docs/architecture.md)."""

from kit.site.load import available_sites, load_site, resolve_site, search_dirs
from kit.site.model import (
    PRECISIONS,
    Container,
    HostMPI,
    Network,
    Node,
    Peak,
    Scheduler,
    Site,
    Transfer,
)
from kit.site.schema import SiteError

__all__ = [
    "PRECISIONS",
    "Container",
    "HostMPI",
    "Network",
    "Node",
    "Peak",
    "Scheduler",
    "Site",
    "SiteError",
    "Transfer",
    "available_sites",
    "load_site",
    "resolve_site",
    "search_dirs",
]
