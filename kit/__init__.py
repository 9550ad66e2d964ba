"""Secure-site deployment kit: images, MPI pairs, transfer, Slurm, scaling."""
