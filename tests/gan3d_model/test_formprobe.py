"""The layer-form probe times injected callables on a clock they advance themselves: which form
it keeps, how long it runs, and which forms it stops timing. Nothing here measures real time."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from gan3d import formprobe


class FakeClock:
    """A clock that only the timed callables move: each call costs what the test says."""

    def __init__(self) -> None:
        self.now = 0.0
        self.calls: dict[tuple[str, str], int] = {}

    def __call__(self) -> float:
        return self.now

    def costing(self, layer: str, form: str, seconds: float):
        def call() -> None:
            self.calls[(layer, form)] = self.calls.get((layer, form), 0) + 1
            self.now += seconds

        return call


def _candidates(clock: FakeClock, costs: dict[str, dict[str, float]]):
    return {
        layer: {form: clock.costing(layer, form, s) for form, s in forms.items()}
        for layer, forms in costs.items()
    }


def test_the_probe_keeps_the_form_made_slower_out_whichever_it_is():
    costs = {
        "d_conv1": {"col2im": 0.03, "direct": 0.09, "fft": 0.01},
        "g_conv4": {"direct": 0.01, "fft": 0.03},
    }
    first = {"d_conv1": "col2im", "g_conv4": "direct"}
    clock = FakeClock()
    chosen = formprobe.probe(_candidates(clock, costs), first, clock=clock)
    assert chosen.forms == {"d_conv1": "fft", "g_conv4": "direct"}
    # the same layers with the frequency domain made the slow one
    costs["d_conv1"]["fft"], costs["g_conv4"]["fft"] = 0.5, 0.002
    clock = FakeClock()
    chosen = formprobe.probe(_candidates(clock, costs), first, clock=clock)
    assert chosen.forms == {"d_conv1": "col2im", "g_conv4": "fft"}
    assert chosen.median_ms()["g_conv4"]["fft"] == 2.0


def test_a_tie_within_the_margin_keeps_the_layers_first_form():
    clock = FakeClock()
    costs = {"d_conv3": {"packed": 0.100, "direct": 0.097, "fft": 0.2}}
    assert formprobe.probe(_candidates(clock, costs), {"d_conv3": "packed"}, clock=clock).forms == {
        "d_conv3": "packed"
    }
    clock = FakeClock()
    costs["d_conv3"]["direct"] = 0.090  # 10% faster: beyond the margin
    assert formprobe.probe(_candidates(clock, costs), {"d_conv3": "packed"}, clock=clock).forms == {
        "d_conv3": "direct"
    }


def test_rounds_stop_at_the_budget_and_a_far_slower_form_stops_being_timed():
    costs = {"g_conv2": {"packed": 1.0, "direct": 5.0, "fft": 0.6}}
    clock = FakeClock()
    p = formprobe.probe(
        _candidates(clock, costs),
        {"g_conv2": "packed"},
        min_rounds=2,
        max_rounds=3,
        budget=2.0,
        clock=clock,
    )
    # round 1 took 6.6 s (> the budget), but two rounds are the least; "direct" (more than twice
    # the best) was timed once and called twice (its untimed warm-up call and round 1)
    assert p.rounds == 2 and p.forms == {"g_conv2": "fft"}
    assert clock.calls == {
        ("g_conv2", "packed"): 3,
        ("g_conv2", "direct"): 2,
        ("g_conv2", "fft"): 3,
    }
    assert [len(t) for t in p.seconds["g_conv2"].values()] == [2, 1, 2]
    clock = FakeClock()
    cheap = {"g_conv2": {"packed": 0.01, "fft": 0.02}}
    p = formprobe.probe(_candidates(clock, cheap), {"g_conv2": "packed"}, budget=2.0, clock=clock)
    assert p.rounds == formprobe.MAX_ROUNDS
    assert p.record()["median_ms"] == {"g_conv2": {"packed": 10.0, "fft": 20.0}}


@given(
    st.dictionaries(
        st.sampled_from(["direct", "packed", "col2im", "fft"]),
        st.integers(1, 10_000),
        min_size=1,
    ),
    st.data(),
)
def test_the_choice_is_the_fastest_form_or_the_first_within_the_margin(costs_ms, data):
    first = data.draw(st.sampled_from(sorted(costs_ms)))
    clock = FakeClock()
    costs = {"layer": {form: ms / 1e3 for form, ms in costs_ms.items()}}
    got = formprobe.probe(_candidates(clock, costs), {"layer": first}, clock=clock).forms["layer"]
    fastest = min(costs_ms.values())
    assume(abs(costs_ms[first] * (1 - formprobe.MARGIN) - fastest) > 1e-3)  # not on the edge
    if costs_ms[first] * (1 - formprobe.MARGIN) <= fastest:
        assert got == first
    else:
        assert costs_ms[got] == fastest


def _step_costs(clock: FakeClock, per_set: dict[str, float], asked: list):
    """`check_by_steps`'s `steps`: a step per set of forms, costing by the set's name."""

    def steps(sets):
        asked.append({name: dict(forms) for name, forms in sets.items()})
        return {name: clock.costing("step", name, per_set[name]) for name in sets}

    return steps


def _probed(clock: FakeClock, costs: dict[str, dict[str, float]], first: dict[str, str]):
    return formprobe.probe(_candidates(clock, costs), first, clock=clock)


def test_whole_steps_settle_the_frequency_domain_the_layer_probe_chose():
    """The layer probe chose the frequency domain for d_conv3; whole steps without it are 8%
    faster, so its fastest other form (direct, not the first form packed) takes its place."""
    costs = {
        "d_conv3": {"packed": 0.017, "direct": 0.016, "fft": 0.013},
        "d_conv1": {"col2im": 0.02, "folded": 0.01},
    }
    first = {"d_conv3": "packed", "d_conv1": "col2im"}
    clock, asked = FakeClock(), []
    probed = _probed(clock, costs, first)
    assert probed.forms == {"d_conv3": "fft", "d_conv1": "folded"}
    per_set = {formprobe.CHOSEN: 0.75, formprobe.WITHOUT_FFT: 0.69}
    checked = formprobe.check_by_steps(probed, _step_costs(clock, per_set, asked), clock=clock)
    assert asked == [
        {
            formprobe.CHOSEN: probed.forms,
            formprobe.WITHOUT_FFT: {"d_conv3": "direct", "d_conv1": "folded"},
        }
    ]
    assert checked.forms == {"d_conv3": "direct", "d_conv1": "folded"}
    assert checked.steps["kept"] == formprobe.WITHOUT_FFT
    assert checked.steps[formprobe.CHOSEN] == [0.75] * formprobe.STEP_ROUNDS
    # each set once untimed (tracing), then STEP_ROUNDS timed steps
    assert clock.calls[("step", formprobe.CHOSEN)] == formprobe.STEP_ROUNDS + 1
    assert checked.wall_seconds > probed.wall_seconds
    assert checked.record()["steps"] == checked.steps


def test_whole_steps_within_the_margin_keep_the_probes_choice():
    clock, asked = FakeClock(), []
    probed = _probed(clock, {"g_conv1": {"direct": 0.010, "fft": 0.0094}}, {"g_conv1": "direct"})
    per_set = {formprobe.CHOSEN: 0.70, formprobe.WITHOUT_FFT: 0.68}  # 3% faster: a tie
    checked = formprobe.check_by_steps(probed, _step_costs(clock, per_set, asked), clock=clock)
    assert checked.forms == {"g_conv1": "fft"} and checked.steps["kept"] == formprobe.CHOSEN


def test_no_step_is_timed_when_no_layer_chose_the_frequency_domain():
    clock, asked = FakeClock(), []
    probed = _probed(clock, {"d_conv2": {"packed": 0.01, "fft": 0.03}}, {"d_conv2": "packed"})
    checked = formprobe.check_by_steps(probed, _step_costs(clock, {}, asked), clock=clock)
    assert checked == probed and asked == [] and checked.record()["steps"] is None


def test_a_saving_the_steps_could_not_misjudge_times_no_step():
    """Float32's 2-3x per layer: the probe's choice stands without a step timed."""
    clock, asked = FakeClock(), []
    costs = {"d_conv2": {"packed": 0.03, "fft": 0.012}, "g_conv2": {"packed": 0.02, "fft": 0.01}}
    probed = _probed(clock, costs, {"d_conv2": "packed", "g_conv2": "packed"})
    alternative = formprobe.without_frequency_domain(probed)
    # D's layer counts twice (its passes are the step's halved): 1 - (2*12 + 10) / (2*30 + 20)
    assert abs(formprobe.predicted_saving(probed, alternative) - (1 - 34 / 80)) < 1e-9
    checked = formprobe.check_by_steps(probed, _step_costs(clock, {}, asked), clock=clock)
    assert checked == probed and asked == []
    # a saving below CHECK_BELOW is timed
    costs["d_conv2"]["fft"], costs["g_conv2"]["fft"] = 0.028, 0.019
    probed = _probed(clock, costs, {"d_conv2": "packed", "g_conv2": "packed"})
    assert formprobe.predicted_saving(probed, alternative) < formprobe.CHECK_BELOW
    per_set = {formprobe.CHOSEN: 0.7, formprobe.WITHOUT_FFT: 0.6}
    checked = formprobe.check_by_steps(probed, _step_costs(clock, per_set, asked), clock=clock)
    assert len(asked) == 1 and checked.forms == alternative
