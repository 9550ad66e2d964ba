"""Moving images into the secure site: SSH push (resumable, verified, installed) and bundles."""
from kit.transfer.push import PushReport, push

__all__ = ["PushReport", "push"]
