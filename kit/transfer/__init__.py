"""Moving images into the secure site: SSH push (resumable, verified, installed) and bundles."""
from kit.transfer.bundle import VerifyReport, bundle, verify_bundle
from kit.transfer.push import PushReport, push

__all__ = ["PushReport", "VerifyReport", "bundle", "push", "verify_bundle"]
