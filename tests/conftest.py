"""Suite-wide settings. Fixtures of one area live in tests/<area>/conftest.py; fixtures several
areas share live in tests/support/*_fixtures.py, registered here once (pytest_plugins), so that a
session fixture is made once for the whole run."""

import os
import re
import tempfile
from pathlib import Path

import pytest

from tests.support import tmpdirs
from tests.support.paths import REPO

pytest_plugins = ("tests.support.mpi_fixtures", "tests.support.slurm_fixtures")

try:  # property tests: a bounded run by default (CI's budget); long locally
    # (--hypothesis-profile=long, or KIT_HYPOTHESIS_PROFILE=long)
    from hypothesis import HealthCheck, settings

    # derandomize: CI tries the same examples on every run (a new find must not block a landing
    # by chance); the long profile explores at random.
    # database=None: no .hypothesis/ written into the checkout.
    settings.register_profile(
        "default",
        max_examples=60,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.register_profile(
        "long",
        max_examples=5000,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    settings.load_profile(
        os.environ.get("KIT_HYPOTHESIS_PROFILE", "default")
    )  # or --hypothesis-profile
except ImportError:  # hypothesis arrives with the test extra (scripts/setup.sh)
    pass
os.environ.setdefault("USER", "root")  # ch-run refuses to start without $USER
# gan3d train's convolution forms: the fixed table, not measured (a probe's choice depends on the
# load of the moment); tests/gan3d_train/test_layer_forms.py runs the measured ones
os.environ.setdefault("GAN3D_FORMS", "fft")
_PRIVATE_TMP = "KIT_TEST_TMPDIR"


@pytest.hookimpl(tryfirst=True)  # before pytest reads --basetemp
def pytest_configure(config):
    """The temporary files of the run (pytest's tmp_path, what the tests' own processes make with
    tempfile, TensorFlow's autograph modules among them) go to one directory of this run, removed at
    its end unless a test failed; pytest-xdist workers take a directory inside their controller's.
    TMPDIR is left as it is: ch-run binds $TMPDIR at the container's /tmp, and the jobs' binds of
    tmp_path directories need the host's /tmp there; the tests that stop TensorFlow processes give
    them this directory as TMPDIR (what a killed process leaves goes with the run). An ordinary
    user's buildah and podman get XDG_RUNTIME_DIR inside it (else they make theirs in /tmp)."""
    parent = os.environ.get(_PRIVATE_TMP)
    if parent is None:
        config._kit_litter = (tmpdirs.system_tmp(), set(tmpdirs.litter(tmpdirs.system_tmp())))
    path = tempfile.mkdtemp(prefix=tmpdirs.run_dir_name_prefix(), dir=parent)
    os.chmod(path, 0o1777)  # as /tmp: the tests that run commands as `nobody` write there too
    config._kit_tmp = (path, parent is None)
    os.environ[_PRIVATE_TMP] = tempfile.tempdir = path
    if parent is None and os.geteuid() != 0:
        os.environ["XDG_RUNTIME_DIR"] = tmpdirs.private_runtime_dir(path)
    if (
        parent is None and not config.option.basetemp
    ):  # as short as pytest's own (sockets live below it)
        config.option.basetemp = os.path.join(path, "b")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_FileOrGroupScheduling(), "kit-xdist-scheduling")


_LEFT_BY = "left_in_tmp"  # a report's user property: what its test left in the system's tmp


def pytest_runtest_setup(item):
    item._kit_tmp_before = set(tmpdirs.litter(tmpdirs.system_tmp()))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test's teardown report names what appeared in the system's temporary directory while it
    ran (with pytest-xdist, maybe another worker's test's: the end of the run says which ran)."""
    outcome = yield
    if call.when == "teardown" and hasattr(item, "_kit_tmp_before"):
        new = set(tmpdirs.left_behind(tmpdirs.system_tmp(), item._kit_tmp_before))
        if new:
            outcome.get_result().user_properties.append((_LEFT_BY, sorted(new)))


_SEEN_LEFT: dict[str, list[str]] = {}  # test id -> what appeared while it ran (the controller's)


def pytest_runtest_logreport(report):
    for key, names in getattr(report, "user_properties", ()):
        if key == _LEFT_BY:
            _SEEN_LEFT.setdefault(report.nodeid, names)


@pytest.hookimpl(trylast=True)  # after pytest-xdist's workers have ended
def pytest_sessionfinish(session, exitstatus):
    """The run's directory goes (kept for a look when a test failed), then what the run left in the
    system's temporary directory fails it: a user cannot always remove that (rootless buildah's
    files belong to subordinate ids), and ten runs make it hundreds of MB."""
    config = session.config
    path, owner = getattr(config, "_kit_tmp", (None, False))
    if not (path and owner):
        return
    failed = exitstatus in (pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.INTERNAL_ERROR)
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    say = reporter.write_line if reporter else print
    if failed:  # rootless buildah's files in it are removed in its user namespace
        unshare = "" if os.geteuid() == 0 else f" (remove it with: buildah unshare rm -rf {path})"
        say(f"temporary files of this run kept for a look: {path}{unshare}")
    elif not tmpdirs.remove_tree(path):
        say(f"could not remove the run's temporary files: {path}")
    system_tmp, before = config._kit_litter
    if os.geteuid() != 0:
        tmpdirs.remove_tool_runtime_dirs(system_tmp, before)
    left = [
        name
        for name in tmpdirs.left_behind(system_tmp, before)
        if not failed or name != os.path.basename(path)
    ]
    if left:
        say(
            f"left in {system_tmp} by this run: "
            f"{len(left)} ({', '.join(left[:5])}{', ...' if len(left) > 5 else ''}); fix: "
            "the test that made them removes them"
        )
        for nodeid, names in _SEEN_LEFT.items():
            if set(names) & set(left):
                say(f"  appeared while {nodeid} ran: {', '.join(sorted(set(names) & set(left)))}")
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """A test file that imports a module of an extra this venv lacks is skipped in one line naming
    the extra (`pip install -e '.[test]'` alone runs the rest), not an error."""
    outcome = yield
    report = outcome.get_result()
    missing = (
        re.search(r"ModuleNotFoundError: No module named '(\w+)", str(report.longrepr))
        if report.failed
        else None
    )
    if missing:
        from kit.extras import EXTRA_OF_MODULE

        module = missing.group(1)
        if module in EXTRA_OF_MODULE:
            report.outcome = "skipped"
            report.longrepr = (
                str(collector.path),
                0,
                f"needs the module {module!r}: "
                f"pip install -e '.[test,{EXTRA_OF_MODULE[module]}]' (or scripts/setup.sh)",
            )


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


# Files that take minutes, longest first: pytest-xdist starts them before the rest (a long one
# started last would leave the other worker idle at the end). Figures: `make test`'s durations.
LONGEST_FIRST = (
    "tests/vcluster/",
    "tests/gan3d_train/test_tutorial_laptop.py",
    "tests/slurm/test_jobs.py",
    "tests/gan3d_train/test_train_mpi.py",
    "tests/study/test_run_slurm.py",
    "tests/gan3d_train/test_train_guards.py",
    "tests/gan3d_train/test_train_signals.py",
    "tests/scale/test_tune.py",
    "tests/study/test_run_local.py",
    "tests/mpi/test_check_verdicts.py",
    "tests/slurm/test_validate_job.py",
    "tests/slurm/test_join_tag.py",
    "tests/gan3d_train/test_provenance.py",
    "tests/packaging/test_offline_install.py",
    "tests/mpi/test_convert_paired.py",
)
# The virtual-cluster tests: on one worker, one after the other (the session's cluster is started
# once; clusters brought up side by side race for a subnet; some tests compare the host's links).
ONE_WORKER = "tests/vcluster/"
# Files of many independent minute-long cases: one case per scheduling unit.
CASE_BY_CASE = ("tests/test_interrupt_commands.py",)


class _FileOrGroupScheduling:
    """With pytest-xdist: a whole test file per worker (its module fixtures, often a real training
    run, are made once), every test of ONE_WORKER on one worker, in the order the items were
    collected (LONGEST_FIRST). Registered only where xdist is loaded (its
    hook is unknown to pytest without it)."""

    @staticmethod
    def pytest_xdist_make_scheduler(config, log):
        from xdist.scheduler import LoadScopeScheduling

        class FileOrGroup(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                path = nodeid.split("::", 1)[0]
                if path.startswith(ONE_WORKER):  # they read the host's links and namespaces
                    return ONE_WORKER
                return nodeid if path.endswith(CASE_BY_CASE) else path

        # xdist would put the files with the most tests first
        config.option.loadscopereorder = False
        return FileOrGroup(config, log)


def _rank(item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return next(
        (i for i, prefix in enumerate(LONGEST_FIRST) if path.startswith(prefix)), len(LONGEST_FIRST)
    )


# Minutes of TensorFlow (a test id, or a whole file), `make test`'s only: `make check` keeps one real
# 2-rank training (the demo's, tests/gan3d_train/test_train_mpi.py) and the 1-rank one without MPI.
SLOW = (
    "tests/gan3d_train/test_tutorial_laptop.py",
    "tests/gan3d_train/test_train_mpi.py::test_resume_gives_bit_identical_weights",
    "tests/gan3d_train/test_train_mpi.py::test_synthetic_showers_are_simulated_once",
    "tests/gan3d_train/test_train_guards.py",
    "tests/gan3d_train/test_train_signals.py",
    "tests/gan3d_train/test_provenance.py",
    "tests/gan3d_train/test_train_bf16.py",
    "tests/gan3d_train/test_checkpoint_replace.py",
    "tests/gan3d_train/test_checkpoint_damage.py",
    "tests/gan3d_train/test_one_process.py::test_a_launchers",
    "tests/gan3d_model/test_bf16_physics.py",
    "tests/gan3d_model/test_step.py::test_same_seed",
    "tests/gan3d_model/test_peak.py::test_other_thread_count",
    "tests/test_interrupt_commands.py::test_a_signal_leaves_old_or_new_and_nothing_else[gan3d-validate",
    "tests/test_interrupt_commands.py::test_a_signal_leaves_old_or_new_and_nothing_else[scale-report",
    "tests/packaging/test_wheel_commit.py",
    "tests/packaging/test_wheelcheck.py::test_every_pin_has_a_wheel",
    "tests/packaging/test_package_data.py::test_an_editable_install",
    "tests/transfer/test_receiver_hostile.py::test_garbage_state_file",
    "tests/gan3d_data/test_validate.py::test_cli",
)
# Parts only the full set-up has (root, Slurm, sshd, buildah, Charliecloud, network namespaces,
# MPI images): a test that uses one, directly or through another fixture, is `system`.
SYSTEM_FIXTURES = frozenset(
    {
        "slurm",
        "sshd",
        "vcluster",
        "rich",
        "built",
        "impi_prefix",
        "mpich_oci",
        "mpich_system_oci",
        "openmpi_tar",
        "openmpi_site",
        "mpich_host_site",
        "netns",
    }
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Marks what `make check` leaves out, and puts the longest files first (LONGEST_FIRST)."""
    items.sort(key=_rank)  # stable: within a rank, the files' own order
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        if used & SYSTEM_FIXTURES:
            item.add_marker(pytest.mark.system)
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)
