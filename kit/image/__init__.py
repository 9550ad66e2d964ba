"""Offline, daemon-free conversion of Docker/OCI images into Charliecloud images."""

from kit.image.convert import ConversionReport, convert
from kit.image.layers import Limits

__all__ = ["convert", "ConversionReport", "Limits"]
