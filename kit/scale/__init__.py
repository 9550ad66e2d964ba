"""Scaling sweeps: plan, submit, collect, and report them against the paper's tables."""
from kit.scale.paper import OverheadTable, PaperTable, paper_table
from kit.scale.report import Row, scaling_table, write_report
from kit.scale.runs import RunResult, Series, load_results

__all__ = ["OverheadTable", "PaperTable", "Row", "RunResult", "Series", "load_results", "paper_table",
           "scaling_table", "write_report"]
