"""Moving images into the secure site: SSH push (resumable, verified, installed), versions and
rollback on the site, and bundles."""
from kit.transfer.bundle import VerifyReport, bundle, verify_bundle
from kit.transfer.push import PushReport, push
from kit.transfer.versions import Installed, Switch, Versions, installed_versions, rollback

__all__ = ["Installed", "PushReport", "Switch", "VerifyReport", "Versions", "bundle", "installed_versions",
           "push", "rollback", "verify_bundle"]
