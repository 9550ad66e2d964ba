"""Which queue states `kit scale collect --wait` stops on: the ones no waiting clears. A job whose
launch failed on its node is requeued held (as Slurm shows it in the reason), and waiting for it
would last the whole timeout."""

import pytest

from kit.slurm.jobs import is_active, is_stuck


@pytest.mark.parametrize(
    "state",
    [
        "PENDING (launch failed requeued held)",
        "PENDING (JobHeldAdmin)",
        "PENDING (JobHeldUser)",
        "PENDING (DependencyNeverSatisfied)",
        "REQUEUE_HOLD",
        "SPECIAL_EXIT",
    ],
)
def test_a_state_only_a_person_can_clear_stops_the_wait(state):
    assert is_active(state) and is_stuck(state)


@pytest.mark.parametrize(
    "state",
    ["PENDING (Resources)", "PENDING (Priority)", "PENDING (None)", "RUNNING", "CONFIGURING"],
)
def test_a_state_that_clears_by_itself_is_waited_for(state):
    assert is_active(state) and not is_stuck(state)
