"""Horovod's calls, as the trainer makes them, for a job of one process without MPI or Horovod.

A laptop with only Python and the venv (`make check`, `scripts/setup.sh --user` without an MPI
compiler) has neither mpi4py nor Horovod; a one-rank run needs no all-reduce, so the trainer takes
this module in Horovod's place. A launcher that starts several ranks is refused before (runtime).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, TypeVar

T = TypeVar("T")
Average = "average"
Compression = SimpleNamespace(none=None, fp16=None)  # nothing goes on a wire


def init() -> None:
    """Nothing to join: the job is this process."""


def shutdown() -> None:
    """Nothing was started."""


def rank() -> int:
    return 0


def size() -> int:
    return 1


def DistributedGradientTape(tape: T, compression: Any = None) -> T:  # noqa: N802  (Horovod's name)
    """One process: its gradients are the job's average already."""
    return tape


def allgather_object(obj: T) -> list[T]:
    return [obj]


def broadcast_object(obj: T, root_rank: int = 0) -> T:
    return obj


def broadcast_variables(variables: Any, root_rank: int = 0) -> None:
    """Every rank already holds rank 0's values."""
