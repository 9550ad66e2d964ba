"""`kit mpi` commands (placeholder until its issue lands)."""
import argparse


def register(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("mpi", help="(not yet implemented)")
