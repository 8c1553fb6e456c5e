"""The rectified-flow solvers (benchmark.editing.flow_solvers) on ODEs with known flows: order of the error in the
step size, velocity evaluations per step, the FLUX schedule and the shared-feature slots, worked by hand."""

from __future__ import annotations

import math

import pytest

from benchmark.editing.flow_edit import shared_slots
from benchmark.editing.flow_solvers import MID, START, evaluations, flux_schedule, integrate, nfe


def linear(x, t, step, which):  # dx/dt = x cos t: x(t) = x(0) exp(sin t)
    return x * math.cos(t)


def riccati(x, t, step, which):  # dx/dt = x^2: x(t) = x0 / (1 - x0 t)
    return x * x


EXACT = {linear: lambda x0, t: x0 * math.exp(math.sin(t)), riccati: lambda x0, t: x0 / (1 - x0 * t)}
ORDER = {"euler": 1, "rf_solver": 2, "fireflow": 2}
# Round trip (invert 0 -> 1, sample back 1 -> 0 over the same grid): Euler's first-order errors add up, but the two
# midpoint-based solvers' h^2 terms of the way out and the way back cancel, leaving h^3 (measured: 2.97-3.00 on both
# flows below). They are at least second order, as their papers say; the round trip is better than that.
ROUND_TRIP_ORDER = {"euler": 1, "rf_solver": 3, "fireflow": 3}


def _grid(n, a=0.0, b=1.0):
    return [a + (b - a) * i / n for i in range(n + 1)]


def _order(errors):
    """Observed order from errors at n, 2n, 4n steps: log2 of successive ratios, averaged."""
    return sum(math.log2(e1 / e2) for e1, e2 in zip(errors, errors[1:], strict=False)) / (len(errors) - 1)


@pytest.mark.parametrize("flow", [linear, riccati], ids=["x_cos_t", "x_squared"])
@pytest.mark.parametrize("solver", ["euler", "rf_solver", "fireflow"])
def test_integration_error_has_the_solvers_order(solver, flow):
    x0 = 0.5
    errors = [abs(integrate(flow, x0, _grid(n), solver) - EXACT[flow](x0, 1.0)) for n in (16, 32, 64, 128)]
    assert abs(_order(errors) - ORDER[solver]) < 0.2, errors


@pytest.mark.parametrize("flow", [linear, riccati], ids=["x_cos_t", "x_squared"])
@pytest.mark.parametrize("solver", ["euler", "rf_solver", "fireflow"])
def test_reconstruction_error_has_the_solvers_order(solver, flow):
    """Invert 0 -> 1, sample 1 -> 0 over the same grid read backwards (the editors' round trip)."""
    x0 = 0.5
    errors = []
    for n in (16, 32, 64, 128):
        times = _grid(n)
        z = integrate(flow, x0, times, solver)
        errors.append(abs(integrate(flow, z, times[::-1], solver) - x0))
    assert abs(_order(errors) - ROUND_TRIP_ORDER[solver]) < 0.25, errors


def test_a_step_by_hand():
    """dx/dt = x^2 from x = 1, one step h = 0.1, worked by hand."""
    assert integrate(riccati, 1.0, [0.0, 0.1], "euler") == pytest.approx(1.1)
    # v = 1; x_mid = 1.05, v_mid = 1.1025; x + h v + h^2/2 (v_mid - v) / (h/2) = 1 + 0.1 + 0.01025
    assert integrate(riccati, 1.0, [0.0, 0.1], "rf_solver") == pytest.approx(1.11025)
    assert integrate(riccati, 1.0, [0.0, 0.1], "fireflow") == pytest.approx(1.11025)
    # FireFlow's second step starts from the first step's midpoint velocity 1.1025, not v(1.11025) = 1.2327;
    # x_mid = 1.11025 + 0.05 * 1.1025 = 1.1653750, v_mid = 1.35809889..., x = 1.11025 + 0.1 * v_mid
    x_mid = 1.11025 + 0.05 * 1.1025
    assert integrate(riccati, 1.0, [0.0, 0.1, 0.2], "fireflow") == pytest.approx(1.11025 + 0.1 * x_mid**2)
    x_mid_rf = 1.11025 + 0.05 * 1.11025**2
    assert integrate(riccati, 1.0, [0.0, 0.1, 0.2], "rf_solver") == pytest.approx(1.11025 + 0.1 * x_mid_rf**2)


@pytest.mark.parametrize("solver,per_step", [("euler", [[START]] * 4), ("rf_solver", [[START, MID]] * 4),
                                             ("fireflow", [[START, MID]] + [[MID]] * 3)])
def test_velocity_evaluations(solver, per_step):
    calls = []

    def velocity(x, t, step, which):
        calls.append((step, which, t))
        return x

    integrate(velocity, 1.0, _grid(4), solver)
    assert [(s, w) for s, w, _ in calls] == [(i, w) for i, ws in enumerate(per_step) for w in ws]
    assert [(s, w) for s, w, _ in calls] == evaluations(solver, 4)
    assert len(calls) == nfe(solver, 4) == {"euler": 4, "rf_solver": 8, "fireflow": 5}[solver]
    for step, which, t in calls:  # START at the step's start time, MID halfway
        assert t == pytest.approx(step / 4 + (0.125 if which == MID else 0))


def test_fireflow_spends_one_evaluation_per_step_after_the_first():
    for n in (1, 2, 8, 15):
        assert nfe("fireflow", n) == n + 1 and nfe("rf_solver", n) == 2 * n and nfe("euler", n) == n


def test_flux_schedule_by_hand():
    # 256 image tokens: mu = 0.5; t -> e^mu / (e^mu + 1/t - 1); linspace(1, 0, 3) = 1, 0.5, 0
    e = math.exp(0.5)
    assert flux_schedule(2, 256) == pytest.approx([1.0, e / (e + 1), 0.0], abs=1e-7)
    # 4096 tokens: mu = 1.15; 1024 tokens (512 px): mu = 0.5 + 0.65 * 768 / 3840 = 0.63
    e = math.exp(1.15)
    assert flux_schedule(2, 4096)[1] == pytest.approx(e / (e + 1), abs=1e-7)
    e = math.exp(0.63)
    assert flux_schedule(4, 1024)[1:4] == pytest.approx([e / (e + 1 / t - 1) for t in (0.75, 0.5, 0.25)],
                                                        abs=1e-6)
    assert flux_schedule(4, 1024, shift=False) == [1.0, 0.75, 0.5, 0.25, 0.0]
    times = flux_schedule(15, 1024)
    assert len(times) == 16 and times[0] == 1.0 and times[-1] == 0.0 and times == sorted(times, reverse=True)


def test_shared_slots_by_hand():
    """Which (sampling step, evaluation) take the inversion's V: the authors' inject list [True] * inject +
    [False] * rest, reversed for the inversion, keyed by sampling step n - 1 - i."""
    # RF-Solver, 3 steps, inject 2: inversion steps 1 and 2 keep both evaluations (sampling steps 1, then 0)
    assert shared_slots("rf_solver", 3, 2) == [(1, START), (1, MID), (0, START), (0, MID)]
    # FireFlow, 8 steps, inject 1 (the authors' scripts): the last inversion step evaluates MID only
    assert shared_slots("fireflow", 8, 1) == [(0, MID)]
    # FireFlow with inject = steps: only the inversion's first step evaluated START (sampling step n - 1)
    assert shared_slots("fireflow", 2, 2) == [(1, START), (1, MID), (0, MID)]
    assert shared_slots("euler", 3, 1) == [(0, START)]
    assert shared_slots("rf_solver", 3, 0) == []
    with pytest.raises(ValueError, match="inject"):
        shared_slots("rf_solver", 3, 4)
