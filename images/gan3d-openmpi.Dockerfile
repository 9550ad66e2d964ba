# 3DGAN training image for sites whose host MPI is Open MPI (the openmpi ABI family).
#
# The container carries an Open MPI so that the image runs on its own; at the site `kit mpi
# pair` binds the host's Open MPI over it: its library dirs onto HOSTMPI_TARGET/libN, its MCA
# components, help files (and an external PMIx's components) onto HOSTMPI_TARGET/ompi-components,
# ompi-help, pmix-components, named inside by OPAL_PKGLIBDIR, OPAL_PKGDATADIR, PMIX_PKGLIBDIR.
# The image's Open MPI must be one the host's may replace (docs/mpi-abi.md): the same major
# series and no newer minor than the host's. Debian bookworm's is 4.1.4 (hosts 4.1.4 and later
# 4.1.x, or 5.x); for another host build the host's own release from Open MPI's tarball:
#   kit image build gan3d.tar --site S --build-arg OPENMPI_VERSION=4.0.7 --build-arg OPENMPI_SHA256=<sha256>
# (`kit image build` refuses a site whose host cannot replace the default before building.)
#
# Template values (--build-arg):
#   BASE            base image (Debian bookworm: python3.11, Open MPI 4.1.4)
#   LOCK            the pin list of the Python stack (constraints.txt; constraints-itex.txt: --itex)
#   OPENMPI_VERSION empty: Debian's Open MPI; A.B.C: that release built into /opt/openmpi
#   OPENMPI_SHA256  the release tarball's sha256 (required with OPENMPI_VERSION; Open MPI
#                   publishes it on its download page)
#   HOSTMPI_TARGET  the site's container.mpi_target (default /opt/hostmpi)
#   HOSTMPI_DIRS    how many host library dirs the site binds (their mount points)
#
# Two stages: `build` has the compilers, cmake and the -dev packages that mpi4py and Horovod
# compile against, and builds the kit's own wheel from pyproject.toml; the final stage starts
# again from BASE with the runtime libraries only, takes the built venv (and /opt/openmpi) and
# installs the kit's wheel into it (no index, no dependencies), so the image carries no toolchain
# onto the site and `kit --version` names the same version as outside.
ARG BASE=debian:bookworm-slim
ARG OPENMPI_VERSION=
ARG OPENMPI_SHA256=
# Test-only pins (the lock holds every extra): the image runs the kit, it does not test it.
ARG TEST_ONLY="--exclude pytest --exclude pytest-timeout --exclude hypothesis --exclude sortedcontainers --exclude iniconfig --exclude pluggy"

FROM ${BASE} AS build
ARG TEST_ONLY
ARG OPENMPI_VERSION
ARG OPENMPI_SHA256
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv python3-dev \
        build-essential cmake git ca-certificates curl bzip2 \
 && if [ -z "${OPENMPI_VERSION}" ]; then \
        apt-get install -y --no-install-recommends openmpi-bin libopenmpi-dev; fi \
 && rm -rf /var/lib/apt/lists/*

# A chosen release: the official tarball, checked against its sha256, built into /opt/openmpi
# with its own PMIx, hwloc and libevent (nothing of the build host's is needed at run time).
RUN mkdir -p /opt/openmpi \
 && if [ -n "${OPENMPI_VERSION}" ]; then \
        set -e; \
        [ -n "${OPENMPI_SHA256}" ] || { echo "OPENMPI_SHA256 is required with OPENMPI_VERSION" >&2; exit 1; }; \
        curl -fsSL -o /tmp/ompi.tar.bz2 \
            "https://download.open-mpi.org/release/open-mpi/v${OPENMPI_VERSION%.*}/openmpi-${OPENMPI_VERSION}.tar.bz2"; \
        echo "${OPENMPI_SHA256}  /tmp/ompi.tar.bz2" | sha256sum -c -; \
        mkdir /tmp/ompi && tar -xjf /tmp/ompi.tar.bz2 -C /tmp/ompi --strip-components=1; \
        cd /tmp/ompi && ./configure --prefix=/opt/openmpi --disable-static --disable-mpi-fortran \
            --with-pmix=internal --with-hwloc=internal --with-libevent=internal >/dev/null; \
        make -j"$(nproc)" >/dev/null && make install >/dev/null; \
        cd / && rm -rf /tmp/ompi /tmp/ompi.tar.bz2; \
    fi
ENV PATH=/opt/openmpi/bin:$PATH

# The stack from the kit's one pin list (constraints.txt: every version, hashes checked by pip);
# Horovod from its pinned sdist, built against the container's Open MPI like mpi4py.
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
ARG OPENMPI_VERSION
ARG HOSTMPI_TARGET=/opt/hostmpi
ARG HOSTMPI_DIRS=1

# Runtime only: the interpreter and Open MPI's library and launcher (what mpi4py and Horovod
# link), from Debian or the release built above.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 \
 && if [ -z "${OPENMPI_VERSION}" ]; then apt-get install -y --no-install-recommends openmpi-bin libopenmpi3; fi \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /opt/openmpi /opt/openmpi
RUN if [ -n "${OPENMPI_VERSION}" ]; then echo /opt/openmpi/lib > /etc/ld.so.conf.d/openmpi.conf && ldconfig; fi

COPY --from=build /opt/venv /opt/venv
# The kit (kit, gan3d, the shipped site configs, templates and pin list) and its `kit` console
# script (`ch-run IMG -- kit ...`): the wheel built above, on top of the pinned stack. `gan3d train
# --site FILE` reads the site config with kit.site; `kit slurm render` hands the job its copy.
COPY --from=build /opt/wheels /opt/wheels
RUN /opt/venv/bin/pip install --no-cache-dir --no-deps --no-index /opt/wheels/secure_site_kit-*.whl \
 && rm -rf /opt/wheels
# No OMP_NUM_THREADS here: ch-run imports this ENV into every job, over the batch script's value.
ENV PATH=/opt/venv/bin:/opt/openmpi/bin:$PATH

# Bind targets for the host's Open MPI (read-only images cannot grow them later).
RUN set -e; i=0; while [ "$i" -lt "${HOSTMPI_DIRS}" ]; do mkdir -p "${HOSTMPI_TARGET}/lib$i"; i=$((i+1)); done; \
    mkdir -p "${HOSTMPI_TARGET}/ompi-components" "${HOSTMPI_TARGET}/ompi-help" "${HOSTMPI_TARGET}/pmix-components"
