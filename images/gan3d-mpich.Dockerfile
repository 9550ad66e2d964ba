# 3DGAN training image for sites whose host MPI is of the MPICH ABI family (Intel MPI on
# SuperMUC-NG / Stampede2 / the Intel lab cluster, MPICH, MVAPICH2, Cray MPICH).
#
# The container carries Debian's MPICH (libmpich.so.12, ABI 12.2) so the image runs on its
# own; at the site `kit mpi pair` binds the host MPI's library dirs onto HOSTMPI_TARGET/libN
# and the alias below makes the image's libmpich.so.12 load the host's libmpi.so.12.
# Build outside the perimeter, convert offline for the site (the pair's mount points and this
# alias are then made by the conversion too, so other recipes need not carry them):
#   kit image convert IMAGE OUT.sqfs --site supermuc-ng     # writes OUT.sqfs.pair.yaml
#
# Template values (--build-arg):
#   BASE            base image (Debian bookworm: python3.11, MPICH 4.0.2)
#   LOCK            the pin list of the Python stack (constraints.txt; constraints-itex.txt: --itex)
#   HOSTMPI_TARGET  the site's container.mpi_target (default /opt/hostmpi)
#   HOSTMPI_LIBDIR  the libN dir holding the host's libmpi.so.12: N = index of that dir in the
#                   site's host_mpi.library_dirs (lib0 for all shipped site configs); "none" for a
#                   host whose MPICH is itself libmpich.so.12 (Debian's): no alias, the pair links it
#   HOSTMPI_DIRS    how many host library dirs the site binds (their mount points)
#
# Two stages: `build` has the compilers, cmake and the -dev packages that mpi4py and Horovod
# compile against, and builds the kit's own wheel from pyproject.toml; the final stage starts
# again from BASE with the runtime libraries only, takes the built venv and installs the kit's
# wheel into it (no index, no dependencies: the pinned stack is there), so the image is smaller,
# carries no toolchain onto the site, and `kit --version` names the same version as outside.
ARG BASE=debian:bookworm-slim
# Test-only pins (the lock holds every extra): the image runs the kit, it does not test it.
ARG TEST_ONLY="--exclude pytest --exclude pytest-timeout --exclude hypothesis --exclude sortedcontainers --exclude iniconfig --exclude pluggy"

FROM ${BASE} AS build
ARG TEST_ONLY
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev mpich libmpich-dev \
        build-essential cmake git ca-certificates \
 && rm -rf /var/lib/apt/lists/*

# The stack from the kit's one pin list (constraints.txt: every version, hashes checked by pip);
# Horovod from its pinned sdist, built against the container's MPICH like mpi4py.
# LOCK: the pin list the stack comes from: constraints.txt, or constraints-itex.txt for the image
# variant with Intel Extension for TensorFlow (`kit image build --itex`: the full tensorflow build
# ITEX requires, in place of tensorflow-cpu; the two cannot share one venv).
ARG LOCK=constraints.txt
COPY ${LOCK} /opt/gan3d/constraints.txt
COPY kit/pins.py /opt/gan3d/pins.py
RUN python3 -m venv /opt/venv \
 && python3 /opt/gan3d/pins.py requirements /opt/gan3d/constraints.txt --exclude horovod ${TEST_ONLY} > /tmp/stack.txt \
 && MPICC=mpicc PIP_NO_BINARY=mpi4py /opt/venv/bin/pip install --no-cache-dir --require-hashes --no-deps \
        -r /tmp/stack.txt \
 && python3 /opt/gan3d/pins.py requirements /opt/gan3d/constraints.txt --only horovod > /tmp/horovod.txt \
 && HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
    HOROVOD_WITHOUT_GLOO=1 /opt/venv/bin/pip install --no-cache-dir --no-build-isolation --require-hashes \
        --no-deps -r /tmp/horovod.txt

# The kit as a real distribution (its metadata carries the version): built with the venv's pinned
# setuptools, nothing fetched. After the stack, so an edit to the kit does not rebuild the stack.
# site-configs/, slurm/, images/: what kit/_data links to in a checkout used as the context.
COPY pyproject.toml README.md constraints.txt /opt/src/
COPY site-configs /opt/src/site-configs
COPY slurm /opt/src/slurm
COPY images /opt/src/images
COPY gan3d /opt/src/gan3d
COPY kit /opt/src/kit
RUN /opt/venv/bin/pip wheel --no-cache-dir --no-deps --no-build-isolation --no-index -w /opt/wheels /opt/src

FROM ${BASE}
ARG HOSTMPI_TARGET=/opt/hostmpi
ARG HOSTMPI_LIBDIR=lib0
ARG HOSTMPI_DIRS=3

# Runtime only: the interpreter and MPICH's launcher and library (what mpi4py and Horovod link).
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 mpich libmpich12 \
 && rm -rf /var/lib/apt/lists/*

COPY --from=build /opt/venv /opt/venv
# The kit (kit, gan3d, the shipped site configs, templates and pin list) and its `kit` console
# script (`ch-run IMG -- kit ...`): the wheel built above, on top of the pinned stack. `gan3d train
# --site FILE` reads the site config with kit.site; `kit slurm render` hands the job its copy.
COPY --from=build /opt/wheels /opt/wheels
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps --no-index /opt/wheels/secure_site_kit-*.whl \
 && rm -rf /opt/wheels
# No OMP_NUM_THREADS here: ch-run imports this ENV into every job, over the batch script's value.
ENV PATH=/opt/venv/bin:$PATH

# Bind targets for the host MPI (read-only images cannot grow them later) and the alias that
# `kit mpi pair` lists under `links:` for an Intel MPI host.
RUN set -e; i=0; while [ "$i" -lt "${HOSTMPI_DIRS}" ]; do mkdir -p "${HOSTMPI_TARGET}/lib$i"; i=$((i+1)); done; \
    mkdir -p "${HOSTMPI_TARGET}/compat"; \
    if [ "${HOSTMPI_LIBDIR}" != none ]; then \
        ln -sfn "../${HOSTMPI_LIBDIR}/libmpi.so.12" "${HOSTMPI_TARGET}/compat/libmpich.so.12"; fi
