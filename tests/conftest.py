"""Shared fixtures: ``stub_compute`` replaces the first computing step of every
command and entry point by raising :class:`Reached`, so that a test of input
validation never computes (and proves that validation comes first)."""
import pytest


class Reached(BaseException):
    """Validation passed: the computation would start here (not an ``Exception``,
    so that no ``except`` clause of the code under test swallows it)."""


@pytest.fixture
def stub_compute(monkeypatch):
    import attnlab.counting
    import attnlab.experiments.figures
    import attnlab.simulation
    import attnlab.theory.branches
    import attnlab.theory.thresholds

    def reached(*args, **kwargs):
        raise Reached()

    for module, name in ((attnlab.simulation, "make_problem"), (attnlab.theory.branches, "fixed_point"),
                         (attnlab.theory.thresholds, "linear_baseline_error"),
                         (attnlab.theory.thresholds, "map_transitions"), (attnlab.counting, "_train"),
                         (attnlab.experiments.figures, "run_sweeps")):
        monkeypatch.setattr(module, name, reached)
    return Reached
