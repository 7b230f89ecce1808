"""One definition of float noise in a plan's cost, shared by the solve (planner/optimize/solve.py: a plan within it of
a proven bound is optimal) and the search over year-round decisions (planner/optimize/yearround.py: a plan found there
replaces the one in hand only where it is cheaper by more). Bounds summed over periods, blocks and floors carry
rounding of this order; a gap smaller than it is no gap."""

from __future__ import annotations

import math

RELATIVE, ABSOLUTE = 1e-9, 1e-6  # of a cost in USD/year


def cost_noise(cost: float) -> float:
    """The float noise of a cost (USD/year)."""
    return RELATIVE * abs(cost) + ABSOLUTE


def cheaper(cost: float, than: float) -> bool:
    """Whether `cost` is below `than` by more than float noise (every cost is below an infinite one)."""
    return cost < than - cost_noise(than) if math.isfinite(than) else True


def proven(objective: float, bound: float) -> bool:
    """Whether a lower bound proves a plan of cost `objective` optimal (the bound within float noise of it)."""
    return bound >= objective - cost_noise(objective)
