"""`kit image` commands (placeholder until its issue lands)."""
import argparse


def register(sub: argparse._SubParsersAction) -> None:
    sub.add_parser("image", help="(not yet implemented)")
