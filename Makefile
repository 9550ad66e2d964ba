.PHONY: setup demo test bench
setup:
	bash scripts/setup.sh
demo: setup
	.venv/bin/python -m gan3d demo --site laptop
test: setup
	bash scripts/test.sh
