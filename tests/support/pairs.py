"""A valid IMAGE.pair.yaml document, for tests that spoil one field at a time."""

GOOD = {
    "kit_pair": 1,
    "site": "localslurm",
    "site_image": "/images/gan3d",
    "binds": ["/usr/lib:/opt/hostmpi/lib0"],
    "env": {"set": {"FI_PROVIDER": "psm2"}, "prepend": {"LD_LIBRARY_PATH": ["/opt/hostmpi/lib0"]}},
    "verdict": {"ok": True, "warnings": []},
    "image_ready": {"ok": True, "missing": []},
}
