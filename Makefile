.PHONY: setup demo test check bench wheelhouse lock itex
setup:
	bash scripts/setup.sh
# The Intel Extension for TensorFlow stack, beside the main one: .venv-itex from constraints-itex.txt
# (not part of make test: 664 MB more to download; its tests skip, naming why, where it is missing).
itex:
	bash scripts/setup.sh --itex
demo: setup
	.venv/bin/python -m gan3d demo --site laptop
test: setup
	bash scripts/test.sh
# The laptop tier: any user, no apt, no daemons (scripts/check.sh).
check:
	bash scripts/check.sh
# For a login node without internet: PYTHON=<the site's python3.X> EXTRAS=report,... PLATFORM=...
wheelhouse:
	bash scripts/wheelhouse.sh
# After changing a requirement in pyproject.toml: re-resolve constraints.txt (the one pin list; then
# constraints-itex.txt, the ITEX stack's, from the same extras) and
# check every pin has a wheel for Python 3.9-3.12 on manylinux2014_x86_64 and manylinux_2_28_x86_64.
lock:
	bash scripts/lock.sh
	bash scripts/lock.sh --itex
