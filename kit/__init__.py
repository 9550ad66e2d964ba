"""Secure-site deployment kit: images, MPI pairs, transfer, Slurm, scaling."""

from importlib import metadata

try:  # results records and `kit --version` name the installed distribution's version
    __version__ = metadata.version("secure-site-kit")
except metadata.PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
