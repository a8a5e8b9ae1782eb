"""Fuzz test (issue 15): every CLI sub-command and option, every public entry point
and parameter, with NaN, +-inf, 0, -1, 1e308, strings, empty and wrong shapes.

Accepted outcomes: a one-line error naming the parameter (CLI: ``attnlab: error``,
exit 1 or 2; API: ``TypeError``/``ValueError``), or the input is accepted and the
computation would start (``stub_compute`` stops it there, see conftest.py: so
validation must come first and the test stays fast). NaN, infinities, non-numeric
strings, empty strings and wrong shapes must always be rejected. Never a traceback.
A few real runs at tiny sizes check that JSON output holds no NaN."""
import inspect
import json
import math
import re

import numpy as np
import pytest

import attnlab
from attnlab import ModelParams
from attnlab.cli import build_parser, main
from conftest import Reached

P0 = ModelParams()

# ----------------------------------------------------------------------------- CLI

CLI_VALUES = ["nan", "inf", "-inf", "0", "-1", "1e308", "abc", "", "1,2,3"]
CLI_MUST_REJECT = {"nan", "inf", "-inf", "abc", ""}
#: Minimal valid arguments of each sub-command (tiny sizes).
CLI_BASE = {
    "train": ["--omega", "0.3", "--alpha", "1", "--d", "8", "--n-test", "10", "--steps", "2", "--no-progress"],
    "theory": ["--omega", "0.3", "--alpha", "1"],
    "transition": ["--omega", "0.3"],
    "phase-diagram": ["--omegas", "0.3", "--workers", "1"],
    "counting": ["--epochs", "1", "--n-train", "16", "--n-test", "8", "--batch-size", "8", "--no-progress"],
    "reproduce": ["overlaps-vs-alpha", "--quick", "--no-progress", "--no-plot", "--out", "res"],
    "warm-up": [],
}
#: Free-text options for which a string like "abc" is a legitimate value (a path).
CLI_FREE_TEXT = {"--out"}


def _cli_cases():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(CLI_BASE), "a sub-command without fuzz base arguments"
    cases = []
    for command, parser in sub.choices.items():
        for action in parser._actions:
            if action.nargs == 0 or action.dest == "help":
                continue  # flags
            for value in CLI_VALUES:
                cases.append((command, action.option_strings[0] if action.option_strings else None, action.dest,
                              value))
    return cases


CLI_CASES = _cli_cases()


def _names(option, dest):
    names = {dest, dest.rstrip("s"), dest.replace("_", "-")}
    if option:
        names |= {option, option.lstrip("-"), option.lstrip("-").rstrip("s").replace("-", "_")}
    return names


CLI_GROUPS = sorted({(c, o, d) for c, o, d, v in CLI_CASES}, key=str)


@pytest.mark.parametrize("command,option,dest", CLI_GROUPS,
                         ids=[f"{c}{' ' + o if o else ''}" for c, o, d in CLI_GROUPS])
def test_cli_fuzz(capsys, stub_compute, tmp_path, monkeypatch, command, option, dest):
    """Each value of CLI_VALUES for one option (one case each in the count)."""
    monkeypatch.chdir(tmp_path)
    failures = [f for value in CLI_VALUES if (f := _cli_case(capsys, command, option, dest, value))]
    assert not failures, "\n".join(failures)


def _cli_case(capsys, command, option, dest, value):
    """``None`` if ``attnlab COMMAND ... OPTION=VALUE`` behaves, else what went wrong."""
    argv = [command] + CLI_BASE[command]
    if option is None:  # the positional argument (reproduce FIGURE)
        argv[1] = value
    else:
        argv.append(f"{option}={value}")
    code, err = _run(argv, capsys)
    if "Traceback" in err:
        return f"{argv}: traceback {err}"
    if code is None or code == 0:
        must = value in CLI_MUST_REJECT and option not in CLI_FREE_TEXT
        return f"{argv} accepted {value!r}" if must else None
    lines = err.strip().splitlines()
    if not (code in (1, 2) and len(lines) == 1 and lines[0].startswith("attnlab")):
        return f"{argv}: exit {code}, stderr {err!r}"
    names = _names(option, dest) | ({f"unrecognized arguments: {value}"} if option is None else set())
    if not any(n in lines[0] for n in names):
        return f"{argv}: message does not name {option or dest}: {lines[0]}"
    if ("invalid float value" in lines[0] or "invalid int value" in lines[0]) and f"; {option}: " not in lines[0]:
        return f"{argv}: a value argparse cannot convert, without what {option} accepts: {lines[0]}"
    return None


NUMBER = r"(-?\d+(?:\.\d+)?(?:e-?\d+)?)"


def _stated_bounds(action):
    """The bounds the help of a numeric option states: ``[(value, inclusive, side)]`` with side
    ``"low"`` or ``"high"``, from "in [a, b]" / "in (a, b]" (the last numeric interval in the
    help) or "> a" / ">= a" (before any ", with" or parenthesis)."""
    intervals = re.findall(rf"in ([\[(]){NUMBER}, {NUMBER}([\])])", action.help or "")
    if intervals:
        left, low, high, right = intervals[-1]
        return [(float(low), left == "[", "low"), (float(high), right == "]", "high")]
    head = re.split(r", with | \(", action.help or "")[0]  # not a bound in a qualifying clause
    return [(float(value), sign == ">=", "low") for sign, value in re.findall(rf"(>=|>) {NUMBER}", head)]


def _numeric_options():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return [(command, action) for command, parser in sub.choices.items() for action in parser._actions
            if action.type in (int, float)]


def test_every_option_has_help():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    missing = [f"{c} {a.option_strings or a.dest}" for c, p in sub.choices.items() for a in p._actions if not a.help]
    assert not missing, missing


def test_an_empty_list_item_is_an_error(capsys, stub_compute, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv in (["phase-diagram", "--omegas", "0,,0.2"], ["reproduce", *CLI_BASE["reproduce"], "--alphas", "1,"]):
        code, err = _run(argv, capsys)
        assert code == 2 and err.strip().splitlines() == [err.strip()] and "empty item" in err, (argv, err)


def test_tol_below_the_followed_floor_warns(capsys, stub_compute):
    """The followed minimiser stops at its quasi-Monte Carlo floor: a --tol below it says so
    (before solving); the default tolerance and the global minimiser do not warn."""
    base = ["theory"] + CLI_BASE["theory"]
    code, err = _run(base + ["--tol", "1e-10"], capsys)
    assert code is None and "below the followed prox's residual floor" in err and "--minimizer global" in err
    for extra in ([], ["--tol", "1e-10", "--minimizer", "global"], ["--tol", "1e-3"]):
        code, err = _run(base + extra, capsys)
        assert code is None and "floor" not in err, extra


def test_every_numeric_option_states_its_range():
    unstated = [f"{c} {a.option_strings[0]}: {a.help!r}" for c, a in _numeric_options() if not _stated_bounds(a)]
    assert not unstated, "\n".join(unstated)


@pytest.mark.parametrize("command,action", _numeric_options(),
                         ids=[f"{c} {a.option_strings[0]}" for c, a in _numeric_options()])
def test_stated_range_is_the_accepted_one(capsys, stub_compute, tmp_path, monkeypatch, command, action):
    """What an option's help states is what it accepts: at each stated bound, the value on the
    allowed side is accepted and the value on the other side rejected with a one-line message
    naming the option (an integer option: the bound and the next integer; a float: the bound
    and the bound shifted by 1e-9 relative, 1e-9 at a bound 0)."""
    monkeypatch.chdir(tmp_path)
    option = action.option_strings[0]
    failures = []
    # train --alpha: "> 0, with n = round(alpha * d) >= 1"; just above 0 is rejected for that second reason
    dependent = "round(alpha * d)" in action.help
    for bound, inclusive, side in _stated_bounds(action):
        step = 1 if action.type is int else (abs(bound) * 1e-9 if bound else 1e-9)
        outside = bound - step if side == "low" else bound + step
        inside = bound if inclusive else (bound + step if side == "low" else bound - step)
        probes = [(inside, True)] if not dependent else []
        for value, allowed in probes + [(bound if not inclusive else outside, False)]:
            text = str(int(value)) if action.type is int else repr(value)
            code, err = _run([command] + CLI_BASE[command] + [f"{option}={text}"], capsys)
            accepted = code in (None, 0)
            if accepted != allowed:
                failures.append(f"{option}={text}: {'accepted' if accepted else 'rejected: ' + err.strip()}")
            elif not accepted and not (len(err.strip().splitlines()) == 1
                                       and any(n in err for n in _names(option, action.dest))):
                failures.append(f"{option}={text}: the message is not one line naming {option}: {err!r}")
    assert not failures, f"{command} {option} ({action.help!r}):\n" + "\n".join(failures)


def _run(argv, capsys):
    """``(exit code, stderr)`` of ``attnlab ARGV``; the code is ``None`` where the computation
    would start (validation passed)."""
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    except Reached:
        code = None
    return code, capsys.readouterr().err


def _no_nan_json(text: str) -> dict:
    def refuse(name):
        raise AssertionError(f"{name} in JSON output")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("argv", [
    ["train", "--omega", "0", "--alpha", "0.5", "--d", "6", "--n-test", "10", "--steps", "3", "--lam", "0"],
    ["train", "--omega", "1", "--alpha", "2", "--d", "6", "--n-test", "10", "--steps", "3", "--sigma", "1e-3",
     "--method", "adam"],
    ["counting", "--epochs", "1", "--n-train", "16", "--n-test", "8", "--batch-size", "8", "--no-progress"],
    ["transition", "--omega", "0.3", "--alpha-max", "0.3"],
], ids=["train-omega0-lam0", "train-omega1-adam", "counting", "transition-null"])
def test_cli_json_has_no_nan(capsys, argv):
    code = main(argv + ["--json"])
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err
    _no_nan_json(out)


# ----------------------------------------------------------------------------- API

API_VALUES = [float("nan"), float("inf"), float("-inf"), 0, -1, 1e308, "abc", "", np.ones((3, 3, 3)), None]
API_MUST_REJECT = (0, 1, 2, 6, 7, 8)  # indices: nan, inf, -inf, "abc", "", wrong shape
#: Parameters for which any string is a legitimate value (a path).
API_FREE_TEXT = {"out", "results_dir"}


def _lazy(path):
    module, name = path.rsplit(".", 1)
    return lambda *a, **k: getattr(__import__(module, fromlist=[name]), name)(*a, **k)


def _data():
    return attnlab.make_problem(P0, 1.0, 6, seed=0)


#: (entry point, valid keyword arguments at tiny sizes, parameters to fuzz)
API = [
    ("attnlab.ModelParams", {}, ["sigma", "lam", "omega", "A", "L", "r"]),
    ("attnlab.run_simulation", dict(params=P0, alpha=1.0, d=6, n_test=10, steps=2, progress=False),
     ["params", "alpha", "d", "init", "seed", "method", "steps", "lr", "n_test", "device", "dtype", "teacher"]),
    ("attnlab.minimize_risk", dict(data=_data, lam=0.01, steps=2, progress=False),
     ["data", "lam", "init", "method", "r", "steps", "lr", "gtol", "seed", "Q0", "device", "dtype"]),
    ("attnlab.make_problem", dict(params=P0, alpha=1.0, d=6), ["params", "alpha", "d", "seed", "dtype", "teacher"]),
    ("attnlab.sample_dataset", dict(params=P0, n=3, d=4), ["params", "n", "d", "Qstar", "seed", "stream", "dtype"]),
    ("attnlab.sample_teacher", dict(d=4, seed=0), ["d", "seed", "teacher"]),
    ("attnlab.positional_encodings", dict(L=2, d=4), ["L", "d", "dtype"]),
    ("attnlab.generalization_error", dict(Q=np.ones(4), params=P0, Qstar=np.ones(4), n_test=4),
     ["Q", "params", "Qstar", "n_test", "seed", "chunk", "device", "dtype", "B"]),
    ("attnlab.overlaps", dict(Q=np.ones(4), Qstar=np.ones(4)), ["Q", "Qstar", "P"]),
    ("attnlab.canonical_sign", dict(Q=np.ones(4), Qstar=np.ones(4)), ["Q", "Qstar", "P"]),
    ("attnlab.fit_linear_baseline", dict(x=np.ones((3, 2, 4)), y=np.ones((3, 2, 4)), lam=0.1), ["x", "y", "lam"]),
    ("attnlab.AttentionRisk", dict(x=np.ones((3, 2, 4)), y=np.ones((3, 2, 4)), lam=0.1),
     ["x", "y", "lam", "device", "dtype"]),
    ("attnlab.training.initial_Q", dict(init="random", data=_data), ["init", "data", "r", "seed"]),
    ("attnlab.theory.solve_state_evolution", dict(params=P0, alpha=1.0),
     ["params", "alpha", "branch", "init", "quad", "tol", "max_iter", "minimizer"]),
    ("attnlab.theory.se_curve", dict(params=P0, alphas=[1.0]), ["params", "alphas", "branch", "quad", "tol",
                                                                 "minimizer"]),
    ("attnlab.theory.find_transition", dict(params=P0),
     ["params", "alpha_max", "grid_points", "xtol", "quad", "tol", "minimizer"]),
    ("attnlab.theory.phase_diagram", dict(params=P0, omegas=[0.3]), ["params", "omegas", "workers"]),
    ("attnlab.theory.linear_baseline_error", dict(params=P0, order=20), ["params", "order"]),
    ("attnlab.theory.Quadrature", {}, ["order_xi", "order_eta", "order_error", "method"]),
    ("attnlab.counting.train_counting", dict(n_train=16, n_test=8, epochs=1, batch_size=8, progress=False),
     ["attention", "seed", "L", "T", "d_model", "d_hidden", "n_train", "n_test", "epochs", "batch_size", "lr",
      "device", "num_threads"]),
    ("attnlab.counting.make_counting_data", dict(n=4), ["n", "L", "T", "seed"]),
    ("attnlab.counting.CountingTransformer", dict(d_model=8, d_hidden=8), ["L", "T", "d_model", "d_hidden",
                                                                          "attention"]),
    ("attnlab.experiments.figures.get_figure", dict(name="overlaps-vs-alpha"), ["name"]),
    ("attnlab.experiments.figures.figure_specs", dict(name="overlaps-vs-alpha", quick=True), ["name", "overrides"]),
    ("attnlab.experiments.figures.load_results", dict(name="overlaps-vs-alpha", results_dir="."),
     ["name", "table", "results_dir"]),
    ("attnlab.experiments.figures.reproduce", dict(name="overlaps-vs-alpha", quick=True, out="res", progress=False),
     ["name", "workers", "out"]),
    ("attnlab.extrapolation.extrapolate", dict(d=[100.0, 200.0], y=[1.0, 2.0]), ["d", "y"]),
    ("attnlab.widgets.se_explorer", dict(show=False), ["omega", "sigma", "lam", "alpha", "A", "quad"]),
    ("attnlab.widgets.overlaps_explorer", dict(show=False), ["omega", "sigma", "lam", "alpha", "A", "quad"]),
    ("attnlab.widgets.teacher_explorer", dict(show=False), ["omega", "h1", "h2", "A"]),
    ("attnlab.widgets.solve_both_branches", dict(params=P0, alpha=1.0), ["params", "alpha", "quad", "tol"]),
]
API_CASES = [(path, base, name, i) for path, base, names in API for name in names for i in range(len(API_VALUES))]
#: Messages may name a parameter by its alias.
ALIASES = {"lam": ("lambda",), "r": ("rank",), "alphas": ("alpha",), "omegas": ("omega",), "name": ("figure",),
           "data": ("Dataset",)}


def _default(path, name):
    module, attr = path.rsplit(".", 1)
    obj = getattr(__import__(module, fromlist=[attr]), attr)
    param = inspect.signature(obj).parameters.get(name)
    return inspect.Parameter.empty if param is None else param.default


def _show(v):
    return f"ndarray{v.shape}" if isinstance(v, np.ndarray) else repr(v)


API_GROUPS = [(path, base, name) for path, base, names in API for name in names]


@pytest.mark.parametrize("path,base,name", API_GROUPS, ids=[f"{p.rsplit('.', 1)[1]}-{n}" for p, b, n in API_GROUPS])
def test_api_fuzz(stub_compute, tmp_path, monkeypatch, path, base, name):
    """Each value of API_VALUES for one parameter (one case each in the count)."""
    monkeypatch.chdir(tmp_path)
    failures = [f for index in range(len(API_VALUES)) if (f := _api_case(path, base, name, index))]
    assert not failures, "\n".join(failures)


def _api_case(path, base, name, index):
    """``None`` if ``entry(name=API_VALUES[index], **base)`` behaves, else what went wrong."""
    from attnlab.theory import StateEvolutionError
    from attnlab.training import TrainingDivergedError

    value = API_VALUES[index]
    if value is None and _default(path, name) is None:
        return None  # None is the documented default (e.g. the method's step budget): not a fuzz value
    kwargs = {k: (v() if callable(v) and k == "data" else v) for k, v in base.items()}
    kwargs[name] = value
    call = f"{path}({name}={_show(value)})"
    try:
        _lazy(path)(**kwargs)
    except Reached:
        pass  # accepted, the computation would start
    except (TypeError, ValueError, TrainingDivergedError, StateEvolutionError) as exc:  # (the last two: reported
        # failures of valid input, e.g. lr = 1e308 diverges)
        msg = str(exc)
        if not any(n in msg for n in (name, *ALIASES.get(name, ()))):
            return f"{call}: message does not name {name}: {msg}"
        return None
    except Exception as exc:  # noqa: BLE001 - any other exception is a failure of this test
        return f"{call}: {type(exc).__name__}: {exc}"
    must = index in API_MUST_REJECT and not (name in API_FREE_TEXT and isinstance(value, str))
    return f"{call} was accepted" if must else None


def test_fuzz_counts():
    """The numbers reported for issue 15."""
    assert len(CLI_CASES) > 500 and len(API_CASES) > 1000
