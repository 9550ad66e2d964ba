"""Arguments of real but tiny trainings (`python -m gan3d train`, tiny preset)."""

from __future__ import annotations

from pathlib import Path


def tiny_train_args(files: list[Path]) -> tuple[str, ...]:
    """Two epochs of three steps of the tiny preset: a real training run in seconds."""
    return (
        "--data",
        f"{files[0]},{files[1]}",
        "--validation-data",
        str(files[2]),
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--epochs",
        "2",
        "--steps-per-epoch",
        "3",
        "--validation-steps",
        "2",
        "--seed",
        "3",
    )
