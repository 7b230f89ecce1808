"""The performance model (planner/perf/layers.py: its layers, measured first). Its names are read from `layers`
on first use, so that importing a light part (`planner.perf.types`) or starting the CLI does not import numpy,
scipy and the roofline."""

from __future__ import annotations

import importlib


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    module = importlib.import_module("planner.perf.layers")
    try:
        value = getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module 'planner.perf' has no attribute {name!r}") from None
    globals()[name] = value
    return value
