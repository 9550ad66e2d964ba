"""Host-MPI bind pairs: find an image's MPI, decide the ABI pairing, write and prove the pair."""
from kit.mpi.abi import MODES, AbiId, Verdict, decide
from kit.mpi.check import CheckResult, run_check
from kit.mpi.discover import ImageMPI, MPILibrary, find_image_mpi
from kit.mpi.pair import Pair, make_pair, pair_path, prepare_image_dir, write_pair
from kit.mpi.paired import PairedConversion, convert_paired

__all__ = ["MODES", "AbiId", "CheckResult", "ImageMPI", "MPILibrary", "Pair", "PairedConversion", "Verdict",
           "convert_paired", "decide", "find_image_mpi", "make_pair", "pair_path", "prepare_image_dir",
           "run_check", "write_pair"]
