"""Scaling sweeps: plan, submit, collect, report them against
the paper's tables, and forecast larger counts.

The names below are imported on first use (PEP 562): submitting or collecting a sweep does not
import the report and its plots.
"""

from __future__ import annotations

import importlib

_HOME = {
    "OverheadTable": "paper",
    "PaperTable": "paper",
    "paper_table": "paper",
    "Row": "rows",
    "scaling_table": "report",
    "write_report": "report",
    "RunResult": "runs",
    "Series": "runs",
    "load_results": "runs",
}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:
        raise AttributeError(f"module 'kit.scale' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kit.scale.{_HOME[name]}"), name)
