"""Command-line interface: ``attnlab train | theory | transition | phase-diagram | counting | reproduce | warm-up``.

Every sub-command prints a readable summary, or one JSON object with ``--json``.
Invalid input prints one line ``attnlab: error: ...`` and exits with code 2; a
problem of the environment (an output folder that cannot be written, a missing
optional package, SIGTERM or Ctrl-C) one line and exit code 1.

The parsers import nothing heavy; each sub-command imports what it runs when it
runs (``attnlab transition`` does not import torch, ``attnlab train`` not numba's
state evolution).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shlex
import signal
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

from .params import (BRANCHES, COUNTING_ATTENTION, COUNTING_DEFAULTS, DEFAULT_A, DEFAULT_ALPHA_MAX, DEFAULT_LAM,
                     DEFAULT_MINIMIZER, DEFAULT_OMEGA, DEFAULT_SIGMA, DEFAULT_TOL, DEFAULT_XTOL, FOLLOWED_TOL, INITS,
                     LAM_MAX, MAX_EPOCHS, MAX_STEPS, MAX_TOLERANCE, METHODS, MIN_XTOL, MINIMIZERS,
                     SIGMA_LIMIT, SIGMA_MAX, SIGMA_MIN, ModelParams, check_int, check_tolerance)

__all__ = ["main", "run", "build_parser", "check_output", "REPORT_ONLY"]


def _parse_A(text: str):
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--A must be four comma-separated numbers a11,a12,a21,a22, got {text!r}")
    if len(vals) != 4:
        raise argparse.ArgumentTypeError(f"--A must be four comma-separated numbers a11,a12,a21,a22, got {text!r}")
    return ((vals[0], vals[1]), (vals[2], vals[3]))


def _parse_list(name: str, text: str | None, kind):
    """A comma-separated list of ``kind`` values (``None`` if ``text`` is); ``ValueError`` naming ``name``."""
    if text is None:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise ValueError(f"{name} must be a non-empty comma-separated list, got {text!r}")
    if not all(parts):
        raise ValueError(f"{name} has an empty item (two commas in a row, or one at an end), got {text!r}")
    try:
        return [kind(p) for p in parts]
    except ValueError:
        raise ValueError(f"{name} must be a comma-separated list of {kind.__name__} values, got {text!r}") from None


def _add_model_arguments(p: argparse.ArgumentParser, omega: bool = True, state_evolution: bool = False) -> None:
    """Add ``--omega --sigma --lam --A`` to a sub-command parser (``omega=False``: no ``--omega``,
    for a command taking a list of them; ``state_evolution``: a command solving the state
    evolution, which has its own ranges of ``sigma`` and ``lambda``)."""
    if omega:
        p.add_argument("--omega", type=float, required=True, help="positional weight of the teacher, in [0, 1]")
    sigma_range = f"in [{SIGMA_MIN:g}, {SIGMA_LIMIT:g}]" if state_evolution else f"in (0, {SIGMA_MAX:g}]"
    p.add_argument("--sigma", type=float, default=DEFAULT_SIGMA,
                   help=f"token content std sigma, {sigma_range} (default {DEFAULT_SIGMA})")
    lam_range = (f"in (0, {LAM_MAX:g}] (the state evolution needs a ridge)" if state_evolution
                 else f"in [0, {LAM_MAX:g}]")
    p.add_argument("--lam", type=float, default=DEFAULT_LAM,
                   help=f"ridge strength lambda, {lam_range} (default {DEFAULT_LAM})")
    p.add_argument("--A", type=_parse_A, default=DEFAULT_A,
                   help="teacher positional matrix a11,a12,a21,a22: non-negative, each row summing to 1 (default "
                        f"{','.join(f'{v:g}' for row in DEFAULT_A for v in row)})")


def _params(args, rank: int = 1) -> ModelParams:
    """:class:`~attnlab.params.ModelParams` from parsed ``--omega --sigma --lam --A``."""
    return ModelParams(sigma=args.sigma, lam=args.lam, omega=getattr(args, "omega", DEFAULT_OMEGA), A=args.A, r=rank)


def check_output(option: str, path, *, folder: bool) -> Path:
    """Check, before any computing, that ``path`` can be written: a folder (created if
    missing) when ``folder``, else a file in an existing folder.

    Raises
    ------
    ValueError
        If ``path`` (or a parent) is an existing file where a folder is needed, the
        file's folder does not exist, or ``path`` is a folder where a file is needed
        (an input error: exit code 2).
    OSError
        If the folder cannot be created or written (e.g. read-only; exit code 1).
    """
    path = Path(path)
    where = path if folder else path.parent
    for p in (where, *where.parents):
        if p.exists() and not p.is_dir():
            raise ValueError(f"{option}: {str(p)!r} is a file, not a folder")
    if not folder:
        if path.is_dir():
            raise ValueError(f"{option}: {str(path)!r} is a folder; give a file name")
        if not where.is_dir():
            raise ValueError(f"{option}: folder {str(where)!r} does not exist")
    try:
        where.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=where, prefix=".attnlab-write-test-"):
            pass
    except OSError as exc:
        raise OSError(f"{option}: cannot write to {str(where)!r} ({exc.strerror or exc})") from None
    return path


# ----------------------------------------------------------------------------- train

def _cmd_train(args) -> dict:
    from .simulation import run_simulation

    res = run_simulation(_params(args, rank=args.rank), args.alpha, args.d, init=args.init, seed=args.seed,
                         method=args.method, steps=args.steps, lr=args.lr, n_test=args.n_test, dtype=args.dtype,
                         device=args.device, progress=not (args.json or args.no_progress))
    if not res.converged:  # the budget asked for ended first: a result, with a warning (exit 3 with --strict)
        warnings.warn(f"not converged: {res.steps} steps of {res.method} ended with gradient rms {res.grad_rms:.2g} "
                      f"> gtol 1e-9 (converged: false; more --steps or --method lbfgs to converge)", RuntimeWarning)
    return res.to_dict()


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train the attention student at finite d (ERM)")
    _add_model_arguments(p)
    p.add_argument("--alpha", type=float, required=True,
                   help="sample complexity n/d > 0, with n = round(alpha * d) >= 1")
    p.add_argument("--d", type=int, required=True, help="embedding dimension, an integer >= 2")
    p.add_argument("--init", choices=INITS, default="random", help="initialisation of Q (default random)")
    p.add_argument("--seed", type=int, default=0, help="random seed, an integer >= 0 (default 0)")
    p.add_argument("--rank", type=int, default=1, help="rank of the student, an integer >= 1 (default 1)")
    p.add_argument("--method", choices=METHODS, default="gd", help="optimiser (default gd)")
    p.add_argument("--steps", type=int, default=None,
                   help=f"step budget, an integer in [1, {MAX_STEPS}] (default: the method's)")
    p.add_argument("--lr", type=float, default=None, help="learning rate > 0 (default: the method's)")
    p.add_argument("--n-test", type=int, default=20_000, help="fresh test samples, an integer >= 2 (default 20000)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64",
                   help="floating-point type of the training (default float64)")
    p.add_argument("--device", default="cpu", help="torch device: cpu (default), cuda or cuda:N")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--strict", action="store_true",
                   help="exit with code 3 if the optimiser did not converge (default: exit 0 with a warning)")
    p.set_defaults(func=_cmd_train)


# ----------------------------------------------------------------------------- state evolution

def _cmd_theory(args) -> dict:
    from .theory import solve_state_evolution

    if args.tol is not None and args.minimizer == "followed" and check_tolerance("tol", args.tol) < FOLLOWED_TOL:
        warnings.warn(f"--tol {args.tol:g} is below the followed prox's residual floor ({FOLLOWED_TOL:g} with "
                      "its default points), which it stops at instead (--minimizer global solves to the tolerance)",
                      RuntimeWarning)
    tol = DEFAULT_TOL if args.tol is None else args.tol
    res = solve_state_evolution(_params(args), args.alpha, args.branch, tol=tol,
                                error_estimate=args.error_estimate, minimizer=args.minimizer)
    out = res.to_dict()
    if res.converged and res.minimum is not True:
        out.update(_instead(res, tol))
    return out


def _instead(res, tol) -> dict:
    """Where ``res`` is no minimum of its branch, or the two stability probes disagree whether it is
    one: a ``note`` saying so (also warned) and ``instead``, the other branch's fixed point if that is
    a minimum (where gradient descent from ``res``'s start goes when it leaves: checked at large ``d``,
    book Chapter 6), else ``Q = 0`` if ``res`` collapsed, else ``None``."""
    from .theory import solve_state_evolution
    other = "positional" if res.branch == "semantic" else "semantic"
    alt = solve_state_evolution(res.params, res.alpha, other, tol=tol, minimizer=res.minimizer, warn=False)
    along = "m" if res.branch == "semantic" else "theta"
    why = ("the branch collapses to Q = 0" if res.collapsed else
           f"the fixed point is unstable along {along} "
           f"(eigenvalue {res.stability:.3g} > 1)" if res.status == "unstable" else "no fixed point on the branch")
    if alt.minimum is not False:  # a minimum, or one the state evolution cannot rule out either
        instead = dict(branch=other, **{k: float(getattr(alt, k)) for k in ('m', 'theta', 'qnorm', 'eps_g', 'eps_t')})
        goes = f"the {other} {'minimum' if alt.minimum else 'fixed point'} (m = {alt.m:.3g}, theta = {alt.theta:.3g}" + (
            ", whose own stability the state evolution cannot decide either)" if alt.minimum is None else ")")
    elif res.collapsed:
        instead = dict(branch="collapsed", m=0.0, theta=0.0, qnorm=0.0, eps_g=float(res.eps_g), eps_t=float(res.eps_t))
        goes = "Q = 0 (uniform attention)"
    else:
        instead, goes = None, None
    # the global prox describes the paper's global minimum, not where gradient descent goes
    to = "gradient descent goes to" if res.minimizer != "global" else "the other branch has"
    if res.probes_agree is False:  # between the probes' spinodals: the theory cannot tell
        by = {True: "a minimum", False: "unstable"}
        seen = {"semantic": "at omega 0.5 its runs at d = 4000-8000 leave inside the band",
                "positional": "its runs at d = 4000-6000 stay up to about the default probe's end"}[res.branch]
        note = (f"the state evolution cannot tell whether there is a {res.branch} minimum here: along {along} "
                f"its fixed point is {by[res.stable]} by the default probe (eigenvalue {res.stability:.3g}) "
                f"and {by[not res.stable]} by the held probe ({res.stability_held:.3g}); gradient descent may "
                f"stay on it or leave" + (f" for {goes}" if goes else "") +
                f" (book Chapter 6, 'How sure is a spinodal?'; gradient descent: {seen})")
    else:
        note = f"no {res.branch} minimum here: {why}; " + (
            f"{to} {goes}" if goes else f"the {other} branch is no minimum either")
    warnings.warn(note, RuntimeWarning)
    return dict(note=note, instead=instead)


def _cmd_transition(args) -> dict:
    from .theory import find_transition

    tr = find_transition(_params(args), alpha_max=args.alpha_max, xtol=args.xtol, minimizer=args.minimizer)
    _warn_not_found([tr])
    return tr.to_dict()


def _warn_not_found(transitions) -> None:
    """One warning for the thresholds that ``find_transition`` did not find (null in the output)."""
    from .theory.thresholds import ALPHA_MAX_LIMIT

    for tr in transitions:
        at = f"omega={tr.params.omega:g}: " if len(transitions) > 1 else ""
        if np.isnan(tr.alpha_c):
            warnings.warn(f"{at}alpha_c: no crossing of the branches' training losses found in "
                          f"[{tr.alpha_min:.3g}, {tr.alpha_max:.3g}] (alpha_c, alpha_l = null)", RuntimeWarning)
        elif np.isnan(tr.alpha_l):
            further = "; a larger --alpha-max searches further" if tr.alpha_max < ALPHA_MAX_LIMIT else ""
            warnings.warn(f"{at}alpha_l: no crossing of the semantic test error with the linear baseline "
                          f"({tr.eps_g_linear:.3e}) found in [alpha_c, {tr.alpha_max:.3g}] (alpha_l = null{further})",
                          RuntimeWarning)


def _cmd_phase_diagram(args) -> dict:
    from .theory import phase_diagram

    omegas = _parse_list("--omegas", args.omegas, float)
    if args.out:  # check the output before the long computation
        import matplotlib.pyplot as plt

        out = check_output("--out", args.out, folder=False)
        formats = plt.figure().canvas.get_supported_filetypes()
        plt.close("all")
        if out.suffix.lstrip(".").lower() not in formats:
            suffixes = ", ".join("." + f for f in sorted(formats))
            raise ValueError(f"--out must end in one of {suffixes}, got {args.out!r}")
    transitions = phase_diagram(_params(args), omegas, alpha_max=args.alpha_max, xtol=args.xtol,
                                workers=args.workers, progress=not args.json, minimizer=args.minimizer)
    _warn_not_found(transitions)
    rows = [t.to_dict() for t in transitions]
    if args.out:
        from .plots import plot_phase_diagram

        plot_phase_diagram(rows, path=args.out)
    return dict(omegas=omegas, alpha_c=[r["alpha_c"] for r in rows], alpha_l=[r["alpha_l"] for r in rows],
                eps_g_linear=[r["eps_g_linear"] for r in rows], out=args.out)


def _add_threshold_arguments(p) -> None:
    p.add_argument("--alpha-max", type=float, default=DEFAULT_ALPHA_MAX,
                   help=f"search alpha_c, alpha_l in (0, alpha_max], alpha_max in (0, 1000] "
                        f"(default {DEFAULT_ALPHA_MAX:g})")
    p.add_argument("--xtol", type=float, default=DEFAULT_XTOL,
                   help=f"tolerance in alpha, in [{MIN_XTOL:g}, {MAX_TOLERANCE:g}] (default {DEFAULT_XTOL:g})")


def _add_minimizer(p) -> None:
    p.add_argument("--minimizer", choices=MINIMIZERS, default=DEFAULT_MINIMIZER,
                   help=f"per-sample proximal minimiser: 'followed' (default {DEFAULT_MINIMIZER!r}; the minimum "
                        "gradient descent reaches from the branch's init) or 'global' (the replica global minimum "
                        "of the paper's Result 4.2)")


def _add_state_evolution(sub) -> None:
    p = sub.add_parser("theory", help="state-evolution fixed point on a branch",
                       description="State-evolution fixed point on a branch, and whether it is a minimum there "
                                   "(status: minimum, unstable, undecided, collapsed, off-branch, not converged; "
                                   "stability: the eigenvalue of the pinned direction, a minimum below 1, by the "
                                   "default probe; stability_held: by the held probe; undecided: the two probes "
                                   "disagree). Where it is no minimum, or undecided, 'note' says so and 'instead' "
                                   "gives the other branch's fixed point, where gradient descent goes if it leaves.")
    _add_model_arguments(p, state_evolution=True)
    p.add_argument("--alpha", type=float, required=True, help="sample complexity n/d, in (0, 10000]")
    p.add_argument("--branch", choices=BRANCHES, default="semantic", help="branch to follow (default semantic)")
    p.add_argument("--tol", type=float, default=None,
                   help=f"tolerance on the max-norm of the fixed-point residual, in (0, {MAX_TOLERANCE:g}] "
                        f"(default {DEFAULT_TOL:g}); the followed prox stops at its quasi-Monte Carlo floor "
                        f"instead, {FOLLOWED_TOL:g} with its default points: --minimizer global for less")
    p.add_argument("--error-estimate", action="store_true", help="also report the quadrature error")
    _add_minimizer(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_theory)

    p = sub.add_parser("transition", help="alpha_c and alpha_l for one omega")
    _add_model_arguments(p, state_evolution=True)
    _add_threshold_arguments(p)
    _add_minimizer(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_transition)

    p = sub.add_parser("phase-diagram", help="alpha_c(omega) and alpha_l(omega)")
    _add_model_arguments(p, omega=False, state_evolution=True)
    p.add_argument("--omegas", default=",".join(f"{w:.2f}" for w in np.linspace(0.0, 0.5, 6)),
                   help="comma-separated omegas in [0, 1] (default 0,0.1,...,0.5)")
    _add_threshold_arguments(p)
    p.add_argument("--workers", type=int, default=2,
                   help="processes solving different omegas at once, an integer >= 1 (default 2)")
    p.add_argument("--out", default=None, help="write the figure to this PNG/PDF/SVG file")
    _add_minimizer(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_phase_diagram)


# ----------------------------------------------------------------------------- counting

def _cmd_counting(args) -> dict:
    from .counting import train_counting

    res = train_counting(attention=args.attention, seed=args.seed, n_train=args.n_train,
                         n_test=args.n_test, epochs=args.epochs, batch_size=args.batch_size,
                         lr=args.lr, device=args.device, num_threads=args.threads,
                         progress=not args.no_progress)
    out = res.to_dict()
    for key in ("loss_history", "train_accuracy_history"):
        out.pop(key)
    return out


def _add_counting(sub) -> None:
    d = COUNTING_DEFAULTS
    p = sub.add_parser(
        "counting", help="train the counting (histogram) transformer (Cui et al. 2024, Fig. 1)",
        description="Train a one-layer transformer on the counting task with positional, "
                    "semantic or unrestricted attention (Cui et al. 2024, Sec. 1, Fig. 1).")
    p.add_argument("--attention", default="both", metavar="{" + ",".join(COUNTING_ATTENTION) + "}",
                   help="what queries and keys see (default: both)")
    p.add_argument("--seed", type=int, default=0, help="random seed, an integer >= 0 (default: 0)")
    p.add_argument("--epochs", type=int, default=d["epochs"],
                   help=f"an integer in [1, {MAX_EPOCHS}] (default: {d['epochs']})")
    p.add_argument("--n-train", type=int, default=d["n_train"], help=f"an integer >= 1 (default: {d['n_train']})")
    p.add_argument("--n-test", type=int, default=d["n_test"], help=f"an integer >= 1 (default: {d['n_test']})")
    p.add_argument("--batch-size", type=int, default=d["batch_size"],
                   help=f"an integer >= 1 (default: {d['batch_size']})")
    p.add_argument("--lr", type=float, default=d["lr"], help=f"Adam learning rate > 0 (default: {d['lr']})")
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    p.add_argument("--threads", type=int, default=1,
                   help="CPU threads for training, an integer >= 1 (default: 1, fastest for this small model)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_cmd_counting)


# ----------------------------------------------------------------------------- reproduce

def _cmd_reproduce(args) -> dict:
    from .experiments.figures import FIGURES, figure_status, get_figure, reproduce
    from .experiments.store import RESULTS_DIR

    if args.list:
        return {f.name: f"{f.description} [{figure_status(f.name, results_dir=args.out)}]" for f in FIGURES.values()}
    if args.figure is None:
        raise ValueError("figure is missing: give a FIGURE to reproduce, or --list")
    get_figure(args.figure)
    overrides = dict(alpha=_parse_list("--alphas", args.alphas, float), seed=_parse_list("--seeds", args.seeds, int),
                     d=_parse_list("--ds", args.ds, int), omega=_parse_list("--omegas", args.omegas, float))
    workers = check_int("workers", args.workers, 1)
    import os
    option = "--out" if args.out is not None else ("$ATTNLAB_RESULTS" if os.environ.get("ATTNLAB_RESULTS")
                                                    else "the results folder")
    check_output(option, RESULTS_DIR if args.out is None else args.out, folder=True)
    if args.dask is not None and args.dask != "local" and "://" not in args.dask:
        raise ValueError(f"--dask must be 'local' or a scheduler address such as tcp://host:8786, got {args.dask!r}")
    if not (math.isfinite(args.dask_timeout) and 0 < args.dask_timeout <= 3600):
        raise ValueError(f"--dask-timeout must be a number of seconds in (0, 3600], got {args.dask_timeout:g}")
    if args.theory_only and args.no_theory:
        raise ValueError("--theory-only and --no-theory exclude each other")
    run = dict(workers=workers, out=args.out, quick=args.quick, theory=not args.no_theory, plot=not args.no_plot,
               simulations=not args.theory_only,
               progress=not (args.json or args.no_progress), overrides=overrides,
               command="attnlab " + " ".join(shlex.quote(a) for a in sys.argv[1:]))
    if not args.dask:
        return reproduce(args.figure, **run)
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise ImportError("--dask needs the 'distributed' package: pip install distributed "
                          "(or run without --dask on local processes)") from None
    from .parallel import limit_threads

    with contextlib.ExitStack() as stack:  # (SIGTERM unwinds like Ctrl-C, see main: the cluster is closed)
        cluster = _local_cluster(stack, LocalCluster, workers) if args.dask == "local" else args.dask
        client = stack.enter_context(_dask_client(Client, cluster, args.dask_timeout))
        client.run(limit_threads)
        return reproduce(args.figure, backend="dask", **run)


def _local_cluster(stack, LocalCluster, workers: int):
    """A ``LocalCluster`` of ``workers`` processes that ignore SIGINT: a terminal's Ctrl-C goes to the
    whole process group, and each worker printed its own traceback (37 lines); this process alone
    unwinds and closes the cluster (the workers inherit the ignored signal when they start)."""
    import logging

    quiet = "ignore::UserWarning:multiprocessing.resource_tracker"  # its note on dask's semaphores left by
    if quiet not in sys.warnoptions:  # an interrupted cluster (the tracker process reads these options)
        sys.warnoptions.append(quiet)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    _extra_grace[0] = 8.0  # closing the cluster takes a few seconds
    try:
        return stack.enter_context(LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                                dashboard_address=None, silence_logs=logging.ERROR))
    finally:
        signal.signal(signal.SIGINT, previous)


def _dask_client(Client, address, timeout: float):
    """A ``distributed.Client`` of ``address`` (a scheduler address or a cluster), or ``OSError`` after
    ``timeout`` seconds: a closed port fails after ``timeout``, an endpoint that accepts the connection
    but does not speak Dask (where the client's own timeout does not apply) too."""
    import threading

    import dask

    made: dict = {}

    def connect():
        try:
            with dask.config.set({"distributed.comm.timeouts.connect": f"{timeout}s"}):
                made["client"] = Client(address, timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 (reported below)
            made["error"] = exc

    thread = threading.Thread(target=connect, name="attnlab-dask-connect", daemon=True)
    thread.start()
    thread.join(timeout + 1.0)
    if "client" in made:
        return made["client"]
    why = "no answer" if thread.is_alive() else f"{type(made['error']).__name__}: {made['error']}"
    raise OSError(f"--dask: could not connect to the Dask scheduler at {address} within {timeout:g} s ({why}); "
                  "check the address, or give more time with --dask-timeout")


def _add_reproduce(sub) -> None:
    p = sub.add_parser(
        "reproduce", help="reproduce a paper figure at full scale (cached, resumable, parallel)",
        description="Run a figure's simulation sweep and state evolution, write NAME.csv, NAME-theory.csv, "
                    "provenance NAME.json and NAME.png. Re-running resumes: finished runs are not redone.")
    p.add_argument("figure", nargs="?", default=None, help="figure name (see --list)")
    p.add_argument("--list", action="store_true", help="list the figures")
    p.add_argument("--workers", type=int, default=2, help="local worker processes, an integer >= 1 (default 2)")
    p.add_argument("--out", default=None,
                   help="output folder (default: $ATTNLAB_RESULTS, else the repository's results/, else ./results)")
    p.add_argument("--quick", action="store_true",
                   help="small smoke-test version (d ~ 40, 1 seed) written to NAME-quick.*; not a result")
    p.add_argument("--alphas", default=None, help="override the alpha grid, e.g. 0.5,1,1.5")
    p.add_argument("--seeds", default=None, help="override the seeds, e.g. 3,4 (rows accumulate in the CSV)")
    p.add_argument("--ds", default=None, help="override the dimension(s) d, e.g. 100,200")
    p.add_argument("--omegas", default=None, help="override omega (phase diagram: the omega grid)")
    p.add_argument("--no-theory", action="store_true", help="skip the state-evolution tasks")
    p.add_argument("--theory-only", action="store_true",
                   help="run the state-evolution tasks only (the figure is drawn with the cached runs); to solve "
                        "them again with the current solver, move NAME-theory.csv aside first")
    p.add_argument("--no-plot", action="store_true", help="do not draw NAME.png")
    p.add_argument("--dask", default=None, metavar="ADDRESS",
                   help="run on a Dask cluster: scheduler address (tcp://host:8786) or 'local' "
                        "(a LocalCluster of --workers processes)")
    p.add_argument("--dask-timeout", type=float, default=5.0, metavar="SECONDS",
                   help="seconds to wait for the Dask scheduler to answer before giving up, in (0, 3600] "
                        "(default 5)")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_cmd_reproduce)


# ----------------------------------------------------------------------------- main

class _OneLineErrorParser(argparse.ArgumentParser):
    """Argument parser whose usage errors are one line (exit code 2)."""

    def error(self, message):
        # a value argparse cannot convert (--omega abc): add what the option accepts, from its help
        bad = re.match(r"argument (\S+?)(?:/\S+)?: invalid (?:float|int|_parse_\w+) value: ", message)
        if bad:
            action = next((a for a in self._actions if bad.group(1) in a.option_strings and a.help), None)
            if action is not None:
                message += f"; {bad.group(1)}: {action.help}"
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


# ----------------------------------------------------------------------------- caches

def _cmd_warm_up(args) -> dict:
    from .theory.warmup import warm_caches

    return warm_caches().to_dict()


def _add_warm_up(sub) -> None:
    p = sub.add_parser("warm-up", help="compile the kernels and write the point sets into their caches, for the "
                                       "sessions to come (e.g. when building a Binder or JupyterHub image)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=_cmd_warm_up)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``attnlab`` command, every sub-command (building it imports nothing heavy)."""
    from . import __version__

    parser = _OneLineErrorParser(prog="attnlab", description=__doc__.splitlines()[0].replace("``", ""))
    parser.add_argument("--version", action="version", version=f"attnlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_train, _add_state_evolution, _add_counting, _add_reproduce, _add_warm_up):
        add(sub)
    return parser


def _print_summary(result: dict) -> None:
    for key, value in result.items():
        if isinstance(value, float):
            value = f"{value:.6g}"
        print(f"{key:>18}: {value}")


def _json_safe(value):
    """Standard JSON: numpy scalars as Python numbers, NaN/inf (e.g. a threshold
    beyond ``--alpha-max``) as ``null``."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


#: Seconds an interrupted command has to unwind (sweeps save their rows and provenance, each
#: file written atomically) before the process is ended (:func:`_interrupted`).
INTERRUPT_GRACE = 2.0
_watchdog_started: list = []
_as_program: list = []  # non-empty in the ``attnlab`` program (run())
_extra_grace = [0.0]  # more seconds for a command that must close a local Dask cluster


def _end_after_grace(name: str) -> None:
    """End the process :data:`INTERRUPT_GRACE` s after an interrupt it has not finished unwinding:
    numba compiling a kernel (seconds, in C) delays the KeyboardInterrupt, or swallows it in a
    finaliser. Compile helpers are stopped first; no file is left half written (every write is
    a temporary file and ``os.replace``), a sweep's session is marked interrupted by the next one."""
    import os
    import time

    time.sleep(INTERRUPT_GRACE + _extra_grace[0])
    precompile = sys.modules.get("attnlab.theory.precompile")
    for helper in list(getattr(precompile, "_helpers", {}).values()):
        with contextlib.suppress(Exception):
            helper is not None and helper.kill()
    with contextlib.suppress(Exception):
        sys.stderr.write(f"attnlab: error: interrupted by {name}\n")
        sys.stderr.flush()
    os._exit(1)


def _interrupted(signum, frame):
    name = signal.Signals(signum).name
    if _as_program and not _watchdog_started:  # (not where main() is called inside another program)
        import threading

        _watchdog_started.append(True)
        threading.Thread(target=_end_after_grace, args=(name,), name="attnlab-interrupt-grace", daemon=True).start()
    raise KeyboardInterrupt(name)


#: Interrupts (SIGINT, SIGTERM) that Python swallowed during a command: raised inside a
#: finaliser, e.g. llvmlite's while numba compiles, they are only reported ("Exception
#: ignored in ...") and the command goes on. :func:`main` collects them here
#: (``sys.unraisablehook``) and ends the command as interrupted.
_swallowed: list = []


def _unraisable(info) -> None:
    if issubclass(info.exc_type, KeyboardInterrupt):
        _swallowed.append(str(info.exc_value) or "SIGINT")
    else:
        sys.__unraisablehook__(info)


def _print_warnings(caught) -> None:
    """One line per distinct warning message (a repeated one with its count)."""
    counts: dict = {}
    for w in caught:
        counts[str(w.message)] = counts.get(str(w.message), 0) + 1
    for message, n in counts.items():
        print(f"attnlab: warning: {message}" + (f" (x{n})" if n > 1 else ""), file=sys.stderr)


def main(argv=None) -> int:
    """Run the CLI; returns the process exit code: 0 success (also a ``train`` run
    whose step budget ended before convergence: ``"converged": false`` and a warning),
    1 failure or a problem of the environment (an unwritable output, a missing
    package, SIGTERM/Ctrl-C), 2 invalid input, 3 result printed but not converged
    (a state-evolution fixed point; ``train --strict``). Warnings are printed on one
    line each (``attnlab: warning: ...``) to stderr."""
    argv = sys.argv[1:] if argv is None else list(argv)
    # SIGTERM (a killed job) unwinds like Ctrl-C: sweeps cancel pending runs and leave consistent files
    previous = signal.signal(signal.SIGTERM, _interrupted)
    previous_int = signal.getsignal(signal.SIGINT)
    if previous_int is signal.default_int_handler:  # Ctrl-C: the same, with the grace period of _interrupted
        signal.signal(signal.SIGINT, _interrupted)
    previous_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    _swallowed.clear()
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # (also while importing)
        print(f"attnlab: error: interrupted by {str(exc) or 'SIGINT'}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)
        if previous_int is signal.default_int_handler:
            signal.signal(signal.SIGINT, previous_int)
        sys.unraisablehook = previous_hook


def _interrupt_in(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt that caused ``exc`` (e.g. SIGTERM inside a compiled
    numba function surfaces as a SystemError), or ``None``."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


_NEGATIVE_LIST = re.compile(r"^-\.?\d[^,]*,")  # e.g. -1,0,0,1 (argparse takes it for an option)


def _glue_negative_lists(argv):
    """``--A -1,0,0,1`` as ``--A=-1,0,0,1``: argparse reads a lone ``-1`` as a number but a
    comma-separated list starting with a minus sign as an unknown option."""
    out = []
    for token in argv:
        if out and _NEGATIVE_LIST.match(token) and out[-1].startswith("--") and "=" not in out[-1]:
            out[-1] = f"{out[-1]}={token}"
        else:
            out.append(token)
    return out


def _main(argv) -> int:
    parser = build_parser()
    args = parser.parse_args(_glue_negative_lists(argv))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            try:
                result = args.func(args)
            finally:  # an interrupt swallowed on the way ends the command (whatever it returned or raised)
                if _swallowed:
                    raise KeyboardInterrupt(_swallowed[0]) from None
        except (ValueError, TypeError) as exc:
            print(f"attnlab: error: {exc}", file=sys.stderr)
            return 2
        except (OSError, ImportError) as exc:
            print(f"attnlab: error: {exc}", file=sys.stderr)
            return 1
        except RuntimeError as exc:
            print(f"attnlab: failed: {exc}", file=sys.stderr)
            return 1
        except SystemError as exc:
            if _interrupt_in(exc) is not None:
                raise _interrupt_in(exc) from None
            print(f"attnlab: failed: {exc}", file=sys.stderr)
            return 1
        finally:
            _print_warnings(caught)
    try:
        if sys.stdout is None:  # (started with its standard output closed: `attnlab ... >&-`)
            raise OSError("it is closed")
        if getattr(args, "json", False):
            print(json.dumps(_json_safe(result), allow_nan=False))
        else:
            _print_summary(result)
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head -c 1`, unbuffered output): it has what it took
        _stdout_to_devnull()
    except (OSError, ValueError) as exc:  # a full disk or /dev/full, a closed stream
        _stdout_to_devnull()
        print(f"attnlab: error: could not write the result to the standard output "
              f"({getattr(exc, 'strerror', None) or exc})", file=sys.stderr)
        return 1
    not_converged = isinstance(result, dict) and result.get("converged") is False
    return 3 if not_converged and getattr(args, "strict", True) else 0


def _stdout_to_devnull() -> None:
    """Point the standard output at ``os.devnull``: after a closed pipe, the flushes still to
    come (the exit's) find nowhere to fail."""
    import os

    with contextlib.suppress(OSError, ValueError, AttributeError):  # (AttributeError: no sys.stdout at all)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


#: Sub-commands that write nothing but their report (stdout, stderr): after them the
#: ``attnlab`` program skips the interpreter's teardown (:func:`run`).
REPORT_ONLY = ("theory", "transition")


def run() -> None:
    """The ``attnlab`` program (console script and ``python -m attnlab.cli``): :func:`main`
    on ``sys.argv``, then exit with its code.

    After a :data:`REPORT_ONLY` sub-command the exit handlers run (``atexit``), the
    standard streams are flushed and the process ends at once (``os._exit``): the
    interpreter's teardown of the modules imported (scipy, numba and the compiled
    kernels) takes about 0.2 s, a tenth of ``attnlab transition``, and frees nothing
    that outlives the process. Every other sub-command exits the ordinary way.
    """
    import atexit
    import os

    _as_program.append(True)
    code = main()
    if len(sys.argv) > 1 and sys.argv[1] in REPORT_ONLY:
        atexit._run_exitfuncs()  # (the handlers the ordinary exit would run, e.g. thread pools' joins)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError, AttributeError):  # a closed pipe (`| head`): what it took is all it gets
                pass
        os._exit(code)
    try:
        if sys.stdout is not None:  # (None: started with the standard output closed, reported by main)
            sys.stdout.flush()
    except BrokenPipeError:  # a closed pipe (e.g. `| head`): not an error of this program
        _stdout_to_devnull()
    sys.exit(code)


if __name__ == "__main__":
    run()
