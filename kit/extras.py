"""Which optional part of the kit (a pip extra) brings a third-party module.

The core (site, slurm, scale plan|submit|collect|cancel, transfer verify) needs only PyYAML,
rich and pyelftools, so it installs on a login node's Python; a command that needs more says
which extra to install, in one line, instead of ending in an ImportError traceback.
"""

from __future__ import annotations

from kit.errors import KitError

DISTRIBUTION = "secure-site-kit"
EXTRA_OF_MODULE = {
    "matplotlib": "report",
    "numpy": "report",
    "isal": "convert",
    "zlib_ng": "convert",
    "zstandard": "convert",
    "fabric": "transfer",
    "paramiko": "transfer",
    "invoke": "transfer",
    "tensorflow": "train",
    "keras": "train",
    "h5py": "train",
    "mpi4py": "train",
    "horovod": "horovod",
    "sklearn": "study",
    "scipy": "study",
    "joblib": "study",
    "threadpoolctl": "study",
}


def missing_extra(exc: BaseException, what: str) -> KitError | None:
    """The one-line error for ``what`` failing on a module an extra brings; None for anything
    else.
    """
    if not isinstance(exc, ModuleNotFoundError) or not exc.name:
        return None
    top = exc.name.split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return KitError(
        f"{what} needs the Python module {top!r}, which is not installed",
        fix=""
        f"pip install '{DISTRIBUTION}[{extra}]' (offline: install.sh VENV {extra} from the wheelhouse)",
    )
