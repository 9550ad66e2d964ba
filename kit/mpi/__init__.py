"""Host-MPI bind pairs: find an image's MPI, decide the ABI pairing, write and prove the pair.

The names below are imported on first use (PEP 562), so that importing one module of the
package (kit.mpi.launch, to render a batch script) does not import the others: the image
readers (ELF, linker cache) and, for the paired conversion, the [convert] extra. Using the
paired conversion without that extra raises its import error (the CLI turns it into one line
naming the extra).
"""

from __future__ import annotations

import importlib

_HOME = {
    "MODES": "abi",
    "AbiId": "abi",
    "Verdict": "abi",
    "decide": "abi",
    "CheckResult": "check",
    "run_check": "check",
    "ImageMPI": "discover",
    "MPILibrary": "discover",
    "find_image_mpi": "discover",
    "Pair": "pair_builder",
    "make_pair": "pair_builder",
    "prepare_image_dir": "pair_builder",
    "write_pair": "pair_builder",
    "pair_target": "pair_builder",
    "PairedConversion": "convert_with_pair",
    "convert_paired": "convert_with_pair",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'kit.mpi' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kit.mpi.{_HOME[name]}"), name)
