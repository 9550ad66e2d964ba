"""Host-MPI bind pairs: find an image's MPI, decide the ABI pairing, write and prove the pair."""
from kit.mpi.abi import MODES, AbiId, Verdict, decide
from kit.mpi.check import CheckResult, run_check
from kit.mpi.discover import ImageMPI, MPILibrary, find_image_mpi
from kit.mpi.pair_builder import Pair, make_pair, pair_path, prepare_image_dir, write_pair

try:  # conversion needs the [convert] extra; reading pairs (kit slurm, kit scale) works with the core
    from kit.mpi.convert_with_pair import PairedConversion, convert_paired
except ModuleNotFoundError as exc:
    if (exc.name or "").split(".")[0] not in ("isal", "zlib_ng", "zstandard"):
        raise

    def __getattr__(name: str):
        """Using the paired conversion without the extra raises the import error again (the CLI
        turns it into one line naming the extra)."""
        if name in ("PairedConversion", "convert_paired"):
            import kit.mpi.convert_with_pair  # noqa: F401  (raises ModuleNotFoundError)
        raise AttributeError(f"module 'kit.mpi' has no attribute {name!r}")

__all__ = ["MODES", "AbiId", "CheckResult", "ImageMPI", "MPILibrary", "Pair", "PairedConversion", "Verdict",
           "convert_paired", "decide", "find_image_mpi", "make_pair", "pair_path", "prepare_image_dir",
           "run_check", "write_pair"]
