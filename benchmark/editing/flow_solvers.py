"""ODE solvers of rectified-flow inversion and editing, as small pure functions over a velocity function.

A rectified-flow model (FLUX.1) predicts a velocity v(x, t); t = 0 is the image, t = 1 the noise. Inversion
integrates dx/dt = v from 0 to 1, sampling from 1 to 0, over a grid of times (`flux_schedule`). One solver step goes
from `t_curr` to `t_next` with h = t_next - t_curr (negative when sampling), as the authors' loops do:

- `euler`: x + h v(x, t_curr). First order; one velocity evaluation per step.
- `rf_solver` (Wang et al. 2024, RF-Solver-Edit's `denoise`): v = v(x, t_curr); the midpoint
  x_mid = x + h/2 v; v_mid = v(x_mid, t_curr + h/2); x + h v + h^2/2 (v_mid - v) / (h/2). Second order; two
  evaluations per step. (In exact arithmetic this is the midpoint rule x + h v_mid; the authors' form is kept, so
  the rounding is theirs.)
- `fireflow` (Deng et al. 2024, FireFlow's `denoise_fireflow`): as the midpoint rule, x + h v_mid, but the velocity
  at the start of a step is the previous step's v_mid (only the first step evaluates it). Second order; one
  evaluation per step after the first (n + 1 for n steps).

Each evaluation is tagged (step index, `START` or `MID`) so the editors can share attention features by step and
evaluation, as the authors' code keys them. The velocity function is called as `velocity(x, t, step, which)`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

START, MID = "start", "mid"  # the evaluation at a step's start, and at its midpoint
SOLVERS = ("euler", "rf_solver", "fireflow")

Velocity = Callable[[Any, float, int, str], Any]


def check_solver(solver: str, *, what: str = "a flow editor") -> str:
    """`solver` itself when it is one of `SOLVERS`, else a ValueError naming the valid ones."""
    if solver not in SOLVERS:
        raise ValueError(f"{what}: unknown solver {solver!r}; expected one of {', '.join(SOLVERS)}")
    return solver


def flux_schedule(steps: int, image_seq_len: int, *, base_seq_len: int = 256, max_seq_len: int = 4096,
                  base_shift: float = 0.5, max_shift: float = 1.15, shift: bool = True) -> list[float]:
    """The sampling times from 1 to 0 (steps + 1 of them), as FLUX's reference `get_schedule` makes them:
    linspace(1, 0, steps + 1), shifted towards 1 by mu, linear in the number of image tokens between
    (base_seq_len, base_shift) and (max_seq_len, max_shift): t -> e^mu / (e^mu + 1/t - 1). The times are computed
    in float32, as the reference does with torch.linspace, and returned as Python floats."""
    import torch

    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    times = torch.linspace(1, 0, steps + 1)  # CPU on purpose: float32 as the reference, returned as Python floats
    if shift:
        slope = (max_shift - base_shift) / (max_seq_len - base_seq_len)
        mu = slope * image_seq_len + (base_shift - slope * base_seq_len)
        times = math.exp(mu) / (math.exp(mu) + (1 / times - 1))
    return [float(t) for t in times.tolist()]


def nfe(solver: str, steps: int) -> int:
    """Velocity evaluations of one integration of `steps` steps (inversion or sampling)."""
    check_solver(solver)
    return {"euler": steps, "rf_solver": 2 * steps, "fireflow": steps + 1 if steps else 0}[solver]


def evaluations(solver: str, steps: int) -> list[tuple[int, str]]:
    """The (step, START | MID) evaluations one integration makes, in order (FireFlow: START at step 0 only)."""
    check_solver(solver)
    out: list[tuple[int, str]] = []
    for i in range(steps):
        if solver != "fireflow" or i == 0:
            out.append((i, START))
        if solver != "euler":
            out.append((i, MID))
    return out


def integrate(velocity: Velocity, x: Any, times: Sequence[float], solver: str) -> Any:
    """Integrate dx/dt = velocity from times[0] to times[-1] with `solver` (one step per consecutive pair).
    Works on floats, numpy arrays and tensors alike."""
    check_solver(solver)
    reused = None  # FireFlow: the previous step's midpoint velocity
    for i, (t_curr, t_next) in enumerate(zip(times[:-1], times[1:], strict=True)):
        h = t_next - t_curr
        if solver == "euler":
            x = x + h * velocity(x, t_curr, i, START)
            continue
        v = reused if reused is not None else velocity(x, t_curr, i, START)
        x_mid = x + h / 2 * v
        v_mid = velocity(x_mid, t_curr + h / 2, i, MID)
        if solver == "rf_solver":
            x = x + h * v + 0.5 * h**2 * ((v_mid - v) / (h / 2))
        else:
            reused = v_mid
            x = x + h * v_mid
    return x
