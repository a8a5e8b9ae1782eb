"""Issue 15 (reliability), items 4-11: no silent wrong answer, no traceback, every
message names its parameter. The fuzz test over every CLI sub-command and public
entry point is in test_fuzz.py."""
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import replace

import numpy as np
import pytest

import attnlab
from attnlab import ModelParams
from attnlab.cli import main
from attnlab.theory import (ConvergenceWarning, OffBranchWarning, Overlaps, Quadrature, QuadratureWarning,
                            StateEvolutionError, find_transition, se_curve, solve_state_evolution)
from attnlab.theory.thresholds import search_grid

P0 = ModelParams(sigma=0.5, lam=0.01, omega=0.3)


def run_cli(capsys, *argv):
    """``attnlab ARGV`` in this process: (exit code, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(err: str, *names) -> bool:
    lines = err.strip().splitlines()
    return len(lines) == 1 and "error" in lines[0] and "Traceback" not in err and any(n in lines[0] for n in names)


# ----------------------------------------------------------------------------- item 4

def test_transition_grid_covers_the_documented_interval():
    """The default grid is unchanged; a larger alpha_max keeps the lower end (0.15)
    and the spacing instead of starting at alpha_max / 20 (which missed alpha_c)."""
    assert np.allclose(search_grid(3.0), np.geomspace(0.15, 3.0, 7))
    for alpha_max in (30.0, 100.0, 1000.0):
        g = np.array(search_grid(alpha_max))
        assert g[0] == pytest.approx(0.15) and g[-1] == pytest.approx(alpha_max)
        assert np.max(g[1:] / g[:-1]) <= 20 ** (1 / 6) + 1e-12
    assert search_grid(1.0)[0] == pytest.approx(0.05)


def test_transition_with_large_alpha_max_finds_alpha_c():
    """(alpha_max = 30 used to start the grid at 1.5 and return alpha_c = nan.)"""
    far = find_transition(P0, alpha_max=30.0, quad=Quadrature.fast(), xtol=1e-2)
    assert far.alpha_min == pytest.approx(0.15) and far.alpha_max == 30.0
    assert 1.1 < far.alpha_c < far.alpha_l < 1.7  # as at alpha_max = 3 (test_theory)


def test_bracketing_skips_sign_changes_within_the_resolution():
    """A sign change between points where |gap| is below its integration error is noise;
    a root next to such a point is still bracketed by the resolved points around it."""
    from attnlab.theory.thresholds import _bracketed_root

    grid = [0.15, 0.25, 0.41, 0.68, 1.1, 1.8, 3.0]
    # a gap shrinking to the noise at the bottom (the spurious alpha_c = 0.152 of the explorer grid)
    noisy = {0.15: -4e-9, 0.25: 1.8e-6, 0.41: 4e-5, 0.68: 2e-4, 1.1: 5e-4, 1.8: 8e-4, 3.0: 1e-3}
    interp = lambda a: float(np.interp(a, grid, [noisy[g] for g in grid]))
    assert 0.15 < _bracketed_root(interp, grid, 1e-4, stop=lambda a: False) < 0.25  # (no resolution: a root)
    assert np.isnan(_bracketed_root(interp, grid, 1e-4, stop=lambda a: False, resolution=lambda a: 1e-7))
    # a true root at 0.68 + 1e-6, where the grid point's |gap| is below the resolution
    line = lambda a: 1e-3 * (a - 0.680001)
    root = _bracketed_root(line, grid, 1e-6, stop=lambda a: False, resolution=lambda a: 1e-7)
    assert root == pytest.approx(0.680001, abs=1e-6)


def test_bracketing_finds_a_root_above_where_the_branch_ends():
    """A semantic branch that appears between two grid points (0.41 and 0.68) and crosses
    soon after (the global minimiser at omega = 0: appears at 0.54, alpha_c = 0.615): the
    root is found whether the grid point below the appearance is nan (the walk stops
    there) or finite by accident (a trivial fixed point counted on the branch: Brent's
    method then meets nan inside the bracket)."""
    from attnlab.theory.thresholds import _bracketed_root

    grid = [0.15, 0.25, 0.41, 0.68, 1.1, 1.8, 3.0]
    line = lambda a: 1e-4 * (0.615 - a)
    for accident in (False, True):
        # the accident is off the line: Brent's method from [0.41, 0.68] then meets nan at once
        gap = lambda a: line(a) if a >= 0.54 else 1e-6 if accident and a == 0.41 else float("nan")
        stop = lambda a: not np.isfinite(gap(a))
        assert _bracketed_root(gap, grid, 1e-4, stop=stop) == pytest.approx(0.615, abs=1e-4), accident
    # no crossing above the end: nan, not the end itself
    above = lambda a: 1e-4 * (0.5 - a) if a >= 0.54 else float("nan")
    assert np.isnan(_bracketed_root(above, grid, 1e-4, stop=lambda a: not np.isfinite(above(a))))


def test_transition_reports_no_crossing_within_the_integration_error():
    """sigma 0.5, lambda 0.04, omega 0.2: both branches shrink towards Q = 0 at the bottom of
    the grid, where their training losses differ by ~1e-8 with a sign that depends on the rule;
    that was reported as alpha_c = 0.152 (and alpha_l = 2.906). Above it the positional branch
    is the lower at every grid point up to alpha = 3 by more than the integration error."""
    p = ModelParams(sigma=0.5, lam=0.04, omega=0.2)
    tr = find_transition(p)
    assert np.isnan(tr.alpha_c) and np.isnan(tr.alpha_l)
    for alpha in (0.41, 1.1, 3.0):
        sem, pos = (solve_state_evolution(p, alpha, b) for b in ("semantic", "positional"))
        assert sem.eps_t - pos.eps_t > 1e-4 * sem.eps_t


def _program(*argv, stdin_pipe=False):
    """The ``attnlab`` program (:func:`attnlab.cli.run`) in a new process, with an exit handler
    that reports on stderr that it ran."""
    code = ("import atexit, sys; atexit.register(lambda: print('exit handler ran', file=sys.stderr)); "
            f"sys.argv = ['attnlab'] + {list(argv)!r}; from attnlab.cli import run; run()")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("argv, code", [
    (("theory", "--omega", "0.3", "--alpha", "1.5", "--json"), 0),  # teardown skipped (REPORT_ONLY)
    (("transition", "--omega", "2", "--json"), 2),                  # teardown skipped, invalid input
    (("transition", "--omega", "0.3", "--alpha-max", "0.4", "--json"), 0),
])
def test_program_exits_with_its_report_flushed_and_exit_handlers_run(argv, code):
    """After the report-only sub-commands the program ends with os._exit: the whole report is
    out, the exit code is main's, and the exit handlers still ran."""
    proc = _program(*argv)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.rstrip().endswith("exit handler ran") and "Traceback" not in proc.stderr
    if code == 0:
        assert isinstance(json.loads(proc.stdout), dict)  # the whole JSON object
    else:
        assert proc.stdout == "" and proc.stderr.startswith("attnlab: error: omega")


@pytest.mark.parametrize("unbuffered", ["", "1"])
def test_program_into_a_closed_pipe_prints_no_traceback(unbuffered):
    """``attnlab transition ... | head -c 1``: the flush before the fast exit meets a closed pipe;
    with ``| true`` the reader is gone before the first write. With PYTHONUNBUFFERED=1 (set in
    many CI runners) the report's own print meets it, which printed a BrokenPipeError traceback
    (in CI, when head exited between the JSON and its newline); a sub-command that exits the
    ordinary way (``reproduce --list``) met it at the exit's flush ("Exception ignored", code 120)."""
    env = dict(os.environ, PYTHONUNBUFFERED=unbuffered)
    program = f"{sys.executable} -m attnlab.cli"
    for command, reader in (("transition --omega 0.3 --alpha-max 0.4 --json", "head -c 1"),
                            ("transition --omega 0.3 --alpha-max 0.4 --json", "true"), ("reproduce --list", "true")):
        proc = subprocess.run(f"{program} {command} | {reader}; exit ${{PIPESTATUS[0]}}", shell=True,
                              executable="/bin/bash", capture_output=True, text=True, timeout=300, env=env)
        assert proc.stdout == ("{" if reader == "head -c 1" else ""), (command, reader, proc.stdout)
        assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
        assert proc.returncode in (0, 1), (command, reader, proc.returncode, proc.stderr)


def test_transition_cli_warns_when_no_crossing(capsys):
    code, out, err = run_cli(capsys, "transition", "--omega", "0.3", "--alpha-max", "0.4", "--json")
    res = json.loads(out)
    assert code == 0 and res["alpha_c"] is None and res["alpha_max"] == 0.4
    assert err.count("\n") == 1 and err.startswith("attnlab: warning: alpha_c: no crossing")


def test_transition_cli_warns_when_alpha_l_is_not_reached(capsys):
    """At omega = 0.5 the losses cross near alpha = 2.86, but the semantic test error stays above
    the linear baseline up to alpha_max = 3: alpha_l is null, and stderr says so (as for alpha_c),
    with the advice to search further."""
    code, out, err = run_cli(capsys, "transition", "--omega", "0.5", "--json")
    res = json.loads(out)
    assert code == 0 and 2.5 < res["alpha_c"] < 3 and res["alpha_l"] is None
    assert err.count("\n") == 1
    assert err.startswith("attnlab: warning: alpha_l: no crossing of the semantic test error with the linear")
    assert "a larger --alpha-max searches further" in err


def test_cli_value_that_is_not_a_number_names_the_range(capsys):
    """argparse's own conversion error is completed with what the option accepts (its help)."""
    code, out, err = run_cli(capsys, "transition", "--omega", "abc")
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert "invalid float value: 'abc'; --omega: positional weight of the teacher, in [0, 1]" in err, err
    code, out, err = run_cli(capsys, "train", "--omega", "0.3", "--alpha", "1", "--d", "1.5")
    assert code == 2 and "--d: embedding dimension, an integer >= 2" in err, err


# ----------------------------------------------------------------------------- item 5

def test_reported_residual_is_that_of_the_reported_point():
    """``residual`` is the max-norm residual of the solver's own map at the reported
    (sign-fixed) overlaps, and ``converged`` means it is within tol."""
    from attnlab.theory.followed_rule import followed_tolerance
    from attnlab.theory.solver import Residual

    quad = Quadrature.fast()
    r = solve_state_evolution(P0, 1.0, "positional", quad=quad)
    f = Residual.of(P0, 1.0, "positional", quad, r.overlaps, minimizer=r.minimizer)
    at_reported = float(np.abs(f(f.pack(r.overlaps))).max())
    assert at_reported <= r.residual * (1 + 1e-9) + 1e-15
    assert r.converged == (r.residual <= max(1e-7, followed_tolerance(quad.qmc)))


def test_sign_fold_is_checked_at_the_reported_point(monkeypatch):
    """A fixed point found at m < 0 is reported as |m|: where the map is not symmetric
    under m -> -m (forced here: its m-update pulls towards m = -0.2 only), the
    reported point is not a fixed point and is not called converged."""
    from attnlab.theory.equations import StateEvolution

    quad = Quadrature.fast()
    start = solve_state_evolution(P0, 1.0, "positional", quad=quad)
    real_call = StateEvolution.__call__
    monkeypatch.setattr(StateEvolution, "__call__",
                        lambda self, ov: replace(real_call(self, ov), m=-0.2 + 0.5 * (ov.m + 0.2)))
    with pytest.warns(ConvergenceWarning, match="did not converge"):
        r = solve_state_evolution(P0, 1.0, "positional", quad=quad, init=replace(start.overlaps, m=-0.15))
    assert r.m == pytest.approx(0.2, abs=1e-3) and not r.converged and r.residual > 0.1


def test_off_branch_result_is_flagged():
    quad = Quadrature.fast()
    with pytest.warns(OffBranchWarning, match="not on the positional branch"):
        r = solve_state_evolution(P0, 1e-3, "positional", minimizer="global", quad=quad)
    assert r.converged and not r.on_branch and r.to_dict()["on_branch"] is False
    assert solve_state_evolution(P0, 1.0, "positional", quad=quad).on_branch


def test_large_quadrature_error_warns(monkeypatch):
    """``error_estimate`` warns when the refined rule moves a value by more than 1%
    (forced: the refined solve is shifted by 20%); not at the paper's point."""
    import attnlab.theory.branches as branches

    quad = Quadrature.fast()
    with warnings.catch_warnings():
        warnings.simplefilter("error", QuadratureWarning)
        r = solve_state_evolution(P0, 1.0, quad=quad, error_estimate=True)
    assert r.quadrature_error["eps_g"] < 0.01 * r.eps_g
    real = branches.solve_state_evolution

    def shifted(*args, quad=None, **kw):
        res = real(*args, quad=quad, **kw)
        return replace(res, eps_g=1.2 * res.eps_g) if quad == Quadrature.fast().refined() else res

    monkeypatch.setattr(branches, "solve_state_evolution", shifted)
    with pytest.warns(QuadratureWarning, match=r"eps_g 20\.0%"):
        real(P0, 1.0, quad=quad, error_estimate=True)


# ----------------------------------------------------------------------------- item 6

@pytest.mark.parametrize("value", [1e308, 0.5, 0.0, -1e-3, float("nan"), float("inf")])
@pytest.mark.parametrize("call,name", [
    (lambda v: solve_state_evolution(P0, 1.0, tol=v), "tol"),
    (lambda v: find_transition(P0, xtol=v), "xtol"),
    (lambda v: find_transition(P0, tol=v), "tol"),
    (lambda v: se_curve(P0, [1.0], tol=v), "tol"),
], ids=["solve-tol", "transition-xtol", "transition-tol", "curve-tol"])
def test_tolerances_are_bounded(call, name, value):
    allowed = r"\[1e-06, 0\.01\]" if name == "xtol" else r"\(0, 0\.01\]"  # alpha to six digits at most
    with pytest.raises(ValueError, match=rf"^{name} must be in {allowed}"):
        call(value)


def test_cli_tolerances_are_bounded(capsys):
    for argv in (("theory", "--omega", "0.3", "--alpha", "1", "--tol", "1e308"),
                 ("transition", "--omega", "0.3", "--xtol", "1e308")):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and out == "" and one_error_line(err, "tol")


# ----------------------------------------------------------------------------- item 7

def test_widget_retries_cold_then_reports_instead_of_raising(monkeypatch):
    import matplotlib.pyplot as plt

    import attnlab.theory.branches as branches
    from attnlab.widgets import SEExplorerState, se_explorer, se_explorer_figure, solve_both_branches

    real = branches.solve_state_evolution
    calls = []

    def warm_fails(*args, init=None, **kw):
        calls.append(init is not None)
        if init is not None:
            raise StateEvolutionError("warm start left the domain")
        return real(*args, **kw)

    quad = Quadrature.fast()
    state = solve_both_branches(P0, 1.0, quad=quad)
    monkeypatch.setattr(branches, "solve_state_evolution", warm_fails)
    state = solve_both_branches(P0, 1.05, state, quad=quad)  # warm starts raise: cold solves are used
    assert calls.count(True) == 2 and not state.errors
    assert all(r.converged for r in state.results.values())

    def always_fails(*args, **kw):
        raise StateEvolutionError("no fixed point here")

    monkeypatch.setattr(branches, "solve_state_evolution", always_fails)
    state = solve_both_branches(P0, 1.0, SEExplorerState(), quad=quad)
    assert state.results == {"positional": None, "semantic": None}
    assert all("no fixed point here" in m for m in state.errors.values())
    plt.close(se_explorer_figure(state, P0, 1.0))  # a message in the figure, not an exception
    live = se_explorer(show=False, quad=quad)
    live.sliders["alpha"].value = 1.5
    live._on_change()  # never raises: the figure carries the message
    assert "error" not in live.status.value.lower() or "no fixed point" in live.status.value


def test_live_overlap_explorer_draws_the_solved_overlaps_of_both_branches():
    """Chapter 5's live explorer: its bars are the fixed points' overlaps, and a slider release
    re-solves at the new point."""
    import matplotlib.pyplot as plt

    from attnlab.widgets import overlaps_explorer

    live = overlaps_explorer(show=False, quad=Quadrature.fast(), alpha=1.5)
    live._on_change()
    res = live.state.results
    assert all(r is not None and r.converged for r in res.values())
    fig = live.draw(**{k: s.value for k, s in live.sliders.items()})
    heights = [[b.get_height() for b in ax.patches] for ax in fig.axes]
    plt.close(fig)
    want = [[abs(getattr(res[b], f)) for b in ("positional", "semantic")] for f in ("m", "theta", "qnorm")]
    np.testing.assert_allclose(heights, want, rtol=1e-12)
    live.sliders["alpha"].value = 2.0
    live._on_change()
    assert abs(live.state.results["semantic"].theta) != want[1][1]


def test_leaving_the_domain_at_the_sign_fixed_overlaps_is_a_state_evolution_error(monkeypatch):
    """A fixed point found at m < 0 is checked at the sign-fixed overlaps (m > 0). If the
    map leaves its domain there (as at omega 0, sigma 0.4, lambda 0.04, alpha 1.5 on the
    explorer grid), that is a StateEvolutionError naming the point, never a
    FloatingPointError out of the solver (a sweep then records the point as not converged)."""
    import attnlab.theory.solver as solver
    from attnlab.theory.equations import StateEvolution

    real = StateEvolution.hats

    def no_domain_at_positive_m(self, ov):
        if ov.m > 0:
            raise FloatingPointError("lambda + sigma^2 Vhat = -1e12 is not positive")
        return real(self, ov)

    monkeypatch.setattr(StateEvolution, "hats", no_domain_at_positive_m)
    # the iteration "ends" at its start, m = -0.3: only the sign-fixed check evaluates m = +0.3
    monkeypatch.setattr(solver, "_solve_coarse", lambda f, x0, tol, max_iter: x0)
    monkeypatch.setattr(solver, "_polish", lambda stages, coarse, x, tol, **kw: (x, None))
    start = Overlaps(q=0.1 * 0.25, m=-0.3, V=25.0, theta=0.0)
    with pytest.raises(StateEvolutionError, match="alpha=1.5"):
        solver.fixed_point(P0, 1.5, "positional", start, warm=False, quad=Quadrature(), tol=3e-4, max_iter=60,
                           pin=True, minimizer="followed")


@pytest.mark.parametrize("kw,name", [(dict(omega=5.0), "omega"), (dict(sigma=float("nan")), "sigma"),
                                     (dict(lam=1.0), "lam"), (dict(alpha=0.0), "alpha"), (dict(alpha="1"), "alpha")])
def test_explorer_initial_values_outside_the_sliders_are_rejected(kw, name):
    from attnlab.widgets import se_explorer

    with pytest.raises((TypeError, ValueError), match=name):
        se_explorer(show=False, **kw)


# ----------------------------------------------------------------------------- item 8

def test_counting_divergence_is_an_error(capsys):
    """(TrainingDivergedError, a RuntimeError: exit 1.)"""
    code, out, err = run_cli(capsys, "counting", "--lr", "1e308", "--epochs", "1", "--n-train", "64",
                             "--n-test", "16", "--batch-size", "32", "--no-progress", "--json")
    assert code == 1 and out == "" and err.count("\n") == 1 and "diverged" in err and "lr" in err


def test_lbfgs_converged_means_gradient_below_gtol():
    data = attnlab.make_problem(P0, 1.0, 40, seed=0)
    res = attnlab.minimize_risk(data, P0.lam, method="lbfgs", dtype="float32", steps=100, progress=False)
    assert res.grad_rms > 1e-9 and not res.converged  # float32 cannot reach gtol = 1e-9
    res = attnlab.minimize_risk(data, P0.lam, method="lbfgs", gtol=1e-4, progress=False)
    assert res.converged and res.grad_rms <= 1e-4


# ----------------------------------------------------------------------------- item 9

def test_train_budget_ending_first_is_a_result_with_a_warning(capsys):
    argv = ("train", "--omega", "0.3", "--alpha", "1", "--d", "8", "--steps", "3", "--n-test", "10", "--json")
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and json.loads(out)["converged"] is False
    assert err.count("\n") == 1 and err.startswith("attnlab: warning: not converged")
    code, out, err = run_cli(capsys, *argv, "--strict")
    assert code == 3 and json.loads(out)["converged"] is False


# ----------------------------------------------------------------------------- item 10

@pytest.fixture
def afile(tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    return f


TRAIN = ("train", "--omega", "0.3", "--alpha", "1", "--d", "8", "--n-test", "10", "--steps", "2")
CLI_CASES = [
    (TRAIN[:4] + ("1e308",) + TRAIN[5:], 2, "alpha"),
    (TRAIN[:6] + ("1000000000",) + TRAIN[7:], 2, "d"),
    (TRAIN + ("--n-test", "1000000000000"), 2, "n_test"),
    (TRAIN + ("--seed", "-1"), 2, "seed"),
    (("theory", "--omega", "0.3", "--alpha", "1", "--sigma", "1e6"), 2, "sigma"),
    (("theory", "--omega", "0.3", "--alpha", "1e308"), 2, "alpha"),
    (("transition", "--omega", "0.3", "--alpha-max", "1e308"), 2, "alpha_max"),
    (("phase-diagram", "--omegas", "0.3", "--sigma", "1e6"), 2, "sigma"),
    (("reproduce", "overlaps-vs-alpha", "--quick", "--dask", "nonsense"), 2, "--dask"),
]



@pytest.mark.parametrize("argv,code,name", CLI_CASES, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in CLI_CASES])
def test_cli_bad_values_get_one_line(capsys, stub_compute, argv, code, name):
    got, out, err = run_cli(capsys, *argv)
    assert got == code and out == "" and one_error_line(err, name), err


@pytest.mark.parametrize("alpha", ["-1", "0", "1e308"])
def test_cli_alpha_error_names_one_interval(capsys, stub_compute, alpha):
    """Every out-of-range alpha is refused with the same interval, (0, 10000], and the
    value as typed (no NumPy repr such as np.float64(2.0))."""
    got, out, err = run_cli(capsys, "theory", "--omega", "0.3", "--alpha", alpha)
    assert got == 2 and one_error_line(err, "alpha") and "alpha must be in (0, 10000], got" in err, err
    got, out, err = run_cli(capsys, "phase-diagram", "--omegas", "0.1,2")
    assert got == 2 and one_error_line(err, "omega") and err.strip().endswith("omega must be in [0, 1], got 2.0"), err


@pytest.mark.parametrize("argv,name,says", [
    (("theory", "--omega", "0.3", "--alpha", "1", "--A", "-1,0,0,1"), "A", "non-negative"),
    (("phase-diagram", "--omegas", "-0.1,0.3"), "omega", "omega must be in [0, 1], got -0.1"),
])
def test_cli_negative_list_values_reach_validation(capsys, stub_compute, argv, name, says):
    """A list starting with a minus sign is the option's value (argparse alone takes it for an
    unknown option and says "expected one argument"): it is checked like any other value."""
    got, out, err = run_cli(capsys, *argv)
    assert got == 2 and one_error_line(err, name) and says in err and "expected one argument" not in err, err


def test_cli_version(capsys):
    import attnlab

    got, out, err = run_cli(capsys, "--version")
    assert got == 0 and out.strip() == f"attnlab {attnlab.__version__}"


@pytest.mark.parametrize("where", ["file", "under-file", "read-only"])
@pytest.mark.parametrize("command", ["reproduce", "phase-diagram"])
def test_cli_unwritable_out_is_refused_before_computing(capsys, stub_compute, afile, monkeypatch, where, command):
    import tempfile

    target = {"file": afile, "under-file": afile / "sub", "read-only": afile.parent / "ro"}[where]
    if where == "read-only":  # (root may write anywhere: the write test is made to fail)
        def refuse(*args, **kw):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
        target.mkdir()
    if command == "phase-diagram" and where != "file":
        target = target / "x.png"
    argv = (("reproduce", "overlaps-vs-alpha", "--quick", "--out", str(target)) if command == "reproduce"
            else ("phase-diagram", "--omegas", "0.3", "--out", str(target)))
    code, out, err = run_cli(capsys, *argv)
    assert code == (1 if where == "read-only" else 2) and one_error_line(err, "--out"), err


def test_cli_dask_without_distributed(capsys, stub_compute, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed -> ImportError
    code, out, err = run_cli(capsys, "reproduce", "overlaps-vs-alpha", "--quick", "--out", str(tmp_path),
                             "--dask", "local")
    assert code == 1 and one_error_line(err, "--dask") and "distributed" in err


def test_sigterm_gives_one_line():
    """SIGTERM during a computation: one line and exit 1, no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "attnlab.cli", "phase-diagram", "--omegas", "0,0.1,0.2,0.3",
                             "--workers", "1", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    time.sleep(2.0)  # (the handler is installed first thing in main, before the imports)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "attnlab: error: interrupted by SIGTERM"


def test_an_interrupt_swallowed_by_a_finaliser_still_ends_the_command(capsys, monkeypatch):
    """SIGTERM or Ctrl-C raised inside a finaliser (llvmlite's, while numba compiles) is only
    reported by Python ("Exception ignored in ...") and the command went on: a warm-up killed
    this way once printed its success report and exited 0. The command now ends as
    interrupted: no report, one line, exit 1; and Ctrl-C is named."""
    import attnlab.cli as cli

    class Finaliser:
        def __del__(self):
            raise KeyboardInterrupt("SIGTERM")

    def swallowed(args):
        Finaliser()  # collected at once: its interrupt goes to sys.unraisablehook
        return {"done": True}

    def failing_after_it(args):
        Finaliser()
        raise RuntimeError("no compiled object yet")

    def ctrl_c(args):
        raise KeyboardInterrupt()

    hook = sys.unraisablehook
    for command in (swallowed, failing_after_it, ctrl_c):
        monkeypatch.setattr(cli, "_cmd_warm_up", command)
        code, out, err = run_cli(capsys, "warm-up")
        name = "SIGINT" if command is ctrl_c else "SIGTERM"
        assert (code, out, err) == (1, "", f"attnlab: error: interrupted by {name}\n"), (command, err)
    assert sys.unraisablehook is hook  # restored after the command


# ----------------------------------------------------------------------------- item 11

def _data():
    return attnlab.make_problem(P0, 1.0, 6, seed=0)


NAN2 = np.array([np.nan, 1.0])
API_CASES = [
    ("params=None", lambda: attnlab.run_simulation(None, 1.0, 8), TypeError, "params"),
    ("params=dict", lambda: solve_state_evolution(dict(sigma=0.5), 1.0), TypeError, "params"),
    ("quad='fast'", lambda: solve_state_evolution(P0, 1.0, quad="fast"), TypeError, "quad"),
    ("dtype=float16", lambda: attnlab.run_simulation(P0, 1.0, 8, dtype="float16"), ValueError, "dtype"),
    ("init=dict", lambda: attnlab.run_simulation(P0, 1.0, 8, init={}), ValueError, "init"),
    ("SE init=dict", lambda: solve_state_evolution(P0, 1.0, init={}), TypeError, "init"),
    ("seed=-1", lambda: attnlab.run_simulation(P0, 1.0, 8, seed=-1), ValueError, "seed"),
    ("seed=1.7", lambda: attnlab.make_problem(P0, 1.0, 8, seed=1.7), ValueError, "seed"),
    ("sigma='0.5'", lambda: ModelParams(sigma="0.5"), TypeError, "sigma"),
    ("sigma=True", lambda: ModelParams(sigma=True), TypeError, "sigma"),
    ("omega=1j", lambda: ModelParams(omega=1j), TypeError, "omega"),
    ("complex A", lambda: ModelParams(A=np.array([[0.6, 0.4], [0.4, 0.6]]) + 0j), TypeError, "A"),
    ("NaN in Q0", lambda: attnlab.minimize_risk(_data(), 0.01, Q0=np.full(6, np.nan), progress=False), ValueError,
     "Q0"),
    ("Q0 rank", lambda: attnlab.minimize_risk(_data(), 0.01, Q0=np.ones((6, 1, 1)), progress=False), ValueError,
     "Q0"),
    ("Q0 r", lambda: attnlab.minimize_risk(_data(), 0.01, Q0=np.ones((6, 3)), progress=False), ValueError, "Q0"),
    ("NaN in Qstar", lambda: attnlab.sample_dataset(P0, 4, 2, Qstar=NAN2), ValueError, "Qstar"),
    ("NaN in x", lambda: attnlab.fit_linear_baseline(np.full((3, 2, 4), np.nan), np.zeros((3, 2, 4))), ValueError,
     "x"),
    ("NaN in y", lambda: attnlab.AttentionRisk(np.zeros((3, 2, 4)), np.full((3, 2, 4), np.nan), 0.0), ValueError,
     "y"),
    ("NaN in Q", lambda: attnlab.generalization_error(NAN2, P0, np.ones(2), n_test=4), ValueError, "Q"),
    ("lr=nan", lambda: attnlab.minimize_risk(_data(), 0.01, lr=float("nan"), progress=False), ValueError, "lr"),
    ("lbfgs lr=nan", lambda: attnlab.minimize_risk(_data(), 0.01, method="lbfgs", lr=float("nan"), progress=False),
     ValueError, "lr"),
    ("data=dict", lambda: attnlab.minimize_risk({}, 0.01), TypeError, "data"),
]


@pytest.mark.parametrize("call,exc,name", [c[1:] for c in API_CASES], ids=[c[0] for c in API_CASES])
def test_api_bad_values_name_the_parameter(call, exc, name):
    with pytest.raises(exc) as info:
        call()
    msg = str(info.value)
    assert name in msg and any(w in msg for w in ("must", "needs")), msg
