"""Moving images into the secure site: SSH push (resumable, verified, installed), versions and
rollback on the site, and bundles."""
from kit.transfer.bundle import VerifyReport, bundle, verify_bundle

try:  # SSH needs the [transfer] extra; bundles and `kit transfer verify` work with the core alone
    from kit.transfer.push import PushReport, push
    from kit.transfer.versions import Installed, Switch, Versions, installed_versions, rollback
except ModuleNotFoundError as exc:
    if (exc.name or "").split(".")[0] not in ("fabric", "paramiko", "invoke"):
        raise

    def __getattr__(name: str):
        """Using push, versions or rollback without the extra raises the import error again
        (the CLI turns it into one line naming the extra)."""
        if name in ("PushReport", "push", "Installed", "Switch", "Versions", "installed_versions", "rollback"):
            import fabric  # noqa: F401  (raises ModuleNotFoundError)
        raise AttributeError(f"module 'kit.transfer' has no attribute {name!r}")

__all__ = ["Installed", "PushReport", "Switch", "VerifyReport", "Versions", "bundle", "installed_versions",
           "push", "rollback", "verify_bundle"]
