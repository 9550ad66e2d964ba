"""`kit transfer` commands (placeholder until its issue lands)."""
import argparse


def register(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("transfer", help="(not yet implemented)")
