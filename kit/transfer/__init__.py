"""Moving images into the secure site: SSH push (resumable, verified, installed), versions and
rollback on the site, and bundles."""

from kit.transfer.bundle import VerifyReport, bundle, verify_bundle

try:  # SSH needs the [transfer] extra; bundles and `kit transfer verify` work with the core alone
    from kit.transfer.push import PushReport, push
    from kit.transfer.versions import Installed, Switch, Versions, installed_versions, rollback
except ImportError as exc:  # missing, or installed but broken (e.g. a mismatched cryptography)
    _unusable = exc

    def __getattr__(name: str):
        """Using push, versions or rollback without a working [transfer] extra raises the import
        error again (the CLI turns a missing module into one line naming the extra)."""
        if name in (
            "PushReport",
            "push",
            "Installed",
            "Switch",
            "Versions",
            "installed_versions",
            "rollback",
        ):
            if isinstance(_unusable, ModuleNotFoundError):
                raise _unusable
            from kit.errors import KitError

            raise KitError(
                f"kit transfer {name}: the [transfer] "
                f"extra is installed but does not import ({type(_unusable).__name__}: "
                f"{str(_unusable)[:120]})",
                fix="pip install --force-reinstall 'secure-site-kit[transfer]'",
            )
        raise AttributeError(f"module 'kit.transfer' has no attribute {name!r}")


__all__ = [
    "Installed",
    "PushReport",
    "Switch",
    "VerifyReport",
    "Versions",
    "bundle",
    "installed_versions",
    "push",
    "rollback",
    "verify_bundle",
]
