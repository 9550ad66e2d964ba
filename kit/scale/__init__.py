"""Scaling sweeps: plan, submit, collect, and report them against the paper's tables."""
from kit.scale.paper import PaperTable, paper_table
from kit.scale.report import Row, RunResult, load_results, scaling_table, series_name, write_report

__all__ = ["PaperTable", "Row", "RunResult", "load_results", "paper_table", "scaling_table",
           "series_name", "write_report"]
