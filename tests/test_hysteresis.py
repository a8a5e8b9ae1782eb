"""Hysteresis (issue 39): gradient descent that follows one minimum along alpha."""
import numpy as np
import pytest

from attnlab import ModelParams
from attnlab.hysteresis import follow_minimum
from attnlab.theory import solve_state_evolution

P01 = ModelParams(omega=0.1)


def test_sweeps_from_the_two_starts_follow_different_minima_inside_the_coexistence_region():
    """omega 0.1, d 300: at alpha 1.2 and 1.4 (between alpha_c ~ 0.70 and the positional spinodal
    ~ 2.48, where the state evolution has both minima) the sweep up from the positional start is
    still positional-led and the sweep down from Q* is semantic, with the state evolution's
    semantic theta to 10% (an independent computation: the d -> infinity fixed point)."""
    alphas = np.array([0.8, 1.0, 1.2, 1.4])
    up = follow_minimum(P01, alphas, 300, start="positional", seed=1)
    down = follow_minimum(P01, alphas[::-1], 300, start="semantic", seed=1)
    for a in (1.2, 1.4):
        u, w = int(np.flatnonzero(up["alpha"] == a)[0]), int(np.flatnonzero(down["alpha"] == a)[0])
        assert abs(up["m"][u]) > abs(up["theta"][u]), (a, up["m"][u], up["theta"][u])
        assert down["outcome"][w] == "semantic", (a, down["m"][w], down["theta"][w])
        se = solve_state_evolution(P01, float(a), "semantic", warn=False)
        assert abs(down["theta"][w] - se.theta) < 0.1 * se.theta, (a, down["theta"][w], se.theta)
    assert list(down["alpha"]) == list(alphas[::-1]) and down["converged"].dtype == bool


def test_a_sweep_is_deterministic_in_its_seed():
    """The same seed gives the same sweep, value for value (every draw takes the seed)."""
    a = follow_minimum(P01, [0.5, 1.0], 100, start="positional", seed=3)
    b = follow_minimum(P01, [0.5, 1.0], 100, start="positional", seed=3)
    assert np.array_equal(a["eps_t"], b["eps_t"]) and np.array_equal(a["m"], b["m"])


@pytest.mark.parametrize("kw,name", [(dict(alphas=[1.0]), "alphas"), (dict(alphas=[1.0, -1.0]), "alphas"),
                                     (dict(alphas=[1.0, np.nan]), "alphas"), (dict(d=1), "d"),
                                     (dict(start="random"), "start"), (dict(method="sgd"), "method"),
                                     (dict(seed=-1), "seed"), (dict(n_test=0), "n_test")])
def test_bad_input_names_the_parameter(kw, name):
    args = dict(params=P01, alphas=[0.5, 1.0], d=50, start="semantic") | kw
    with pytest.raises(ValueError, match=name):
        follow_minimum(args.pop("params"), args.pop("alphas"), args.pop("d"), **args)
