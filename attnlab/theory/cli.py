"""Sub-commands ``theory``, ``transition`` and ``phase-diagram`` of the ``attnlab`` CLI.

The commands are functions of a :class:`~attnlab.params.ModelParams` and their
options (:func:`theory_command`, :func:`transition_command`,
:func:`phase_diagram_command`), importable without :mod:`attnlab.cli`;
:func:`add_cli` registers their parsers with it.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from ..params import BRANCHES, DEFAULT_ALPHA_MAX, DEFAULT_XTOL
from .equations import DEFAULT_MINIMIZER, MINIMIZERS

__all__ = ["theory_command", "transition_command", "phase_diagram_command", "parse_omegas", "add_cli"]


def theory_command(params, alpha: float, branch: str = "semantic", tol: float = 1e-7, error_estimate: bool = False,
                   minimizer: str | None = None) -> dict:
    """``attnlab theory``: one fixed point (:func:`~attnlab.theory.solve_state_evolution`), as a dict."""
    from .branches import solve_state_evolution

    return solve_state_evolution(params, alpha, branch, tol=tol, error_estimate=error_estimate,
                                 minimizer=minimizer).to_dict()


def transition_command(params, alpha_max: float = DEFAULT_ALPHA_MAX, xtol: float = DEFAULT_XTOL,
                       minimizer: str | None = None) -> dict:
    """``attnlab transition``: ``alpha_c`` and ``alpha_l`` (:func:`~attnlab.theory.find_transition`),
    as a dict; a ``RuntimeWarning`` if no crossing is found."""
    from .thresholds import find_transition

    tr = find_transition(params, alpha_max=alpha_max, xtol=xtol, minimizer=minimizer)
    if np.isnan(tr.alpha_c):
        warnings.warn(f"alpha_c: no crossing of the branches' training losses found in [{tr.alpha_min:.3g}, "
                      f"{tr.alpha_max:.3g}] (alpha_c, alpha_l = null)", RuntimeWarning)
    return tr.to_dict()


def parse_omegas(text: str) -> list:
    """``"0,0.1,0.2"`` -> ``[0.0, 0.1, 0.2]``; ``ValueError`` naming ``--omegas`` otherwise."""
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--omegas must be comma-separated numbers in [0, 1], got {text!r}") from None


def phase_diagram_command(params, omegas, alpha_max: float = DEFAULT_ALPHA_MAX, xtol: float = DEFAULT_XTOL,
                          workers: int = 2, progress: bool = False, minimizer: str | None = None, out=None) -> dict:
    """``attnlab phase-diagram``: :func:`~attnlab.theory.phase_diagram` over ``omegas``, as a dict,
    and the figure in ``out`` (a file whose folder the caller has checked; its format is
    checked here, before the computation)."""
    from .thresholds import phase_diagram

    if out:
        import matplotlib.pyplot as plt

        formats = plt.figure().canvas.get_supported_filetypes()
        plt.close("all")
        if Path(out).suffix.lstrip(".").lower() not in formats:
            raise ValueError(f"--out must end in one of {', '.join('.' + f for f in sorted(formats))}, got {out!r}")
    rows = [t.to_dict() for t in phase_diagram(params, omegas, alpha_max=alpha_max, xtol=xtol, workers=workers,
                                                progress=progress, minimizer=minimizer)]
    if out:
        from ..plots import plot_phase_diagram

        plot_phase_diagram(rows, path=out)
    return dict(omegas=list(omegas), alpha_c=[r["alpha_c"] for r in rows], alpha_l=[r["alpha_l"] for r in rows],
                eps_g_linear=[r["eps_g_linear"] for r in rows], out=out)


def _add_minimizer(p) -> None:
    p.add_argument("--minimizer", choices=MINIMIZERS, default=DEFAULT_MINIMIZER,
                   help="per-sample proximal minimiser: 'followed' (default; the minimum gradient descent reaches "
                        "from the branch's init) or 'global' (the replica global minimum of the paper's Result 4.2)")


def add_cli(sub) -> None:
    """Register ``theory``, ``transition`` and ``phase-diagram`` with the ``attnlab`` parser
    (its model options and output check come from :mod:`attnlab.cli`)."""
    from ..cli import add_model_arguments, check_output, params_from_args

    p = sub.add_parser("theory", help="state-evolution fixed point on a branch")
    add_model_arguments(p)
    p.add_argument("--alpha", type=float, required=True, help="sample complexity n/d > 0")
    p.add_argument("--branch", choices=BRANCHES, default="semantic")
    p.add_argument("--tol", type=float, default=1e-7,
                   help="tolerance on the max-norm of the fixed-point residual, > 0 (default 1e-7)")
    p.add_argument("--error-estimate", action="store_true", help="also report the quadrature error")
    _add_minimizer(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lambda a: theory_command(params_from_args(a), a.alpha, a.branch, a.tol, a.error_estimate,
                                                 a.minimizer))

    p = sub.add_parser("transition", help="alpha_c and alpha_l for one omega")
    add_model_arguments(p)
    p.add_argument("--alpha-max", type=float, default=DEFAULT_ALPHA_MAX)
    p.add_argument("--xtol", type=float, default=DEFAULT_XTOL)
    _add_minimizer(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=lambda a: transition_command(params_from_args(a), a.alpha_max, a.xtol, a.minimizer))

    def phase_diagram_cmd(a):
        omegas = parse_omegas(a.omegas)
        if a.out:
            check_output("--out", a.out, folder=False)  # before the long computation
        return phase_diagram_command(params_from_args(a), omegas, a.alpha_max, a.xtol, a.workers,
                                     progress=not a.json, minimizer=a.minimizer, out=a.out)

    p = sub.add_parser("phase-diagram", help="alpha_c(omega) and alpha_l(omega)")
    add_model_arguments(p, omega_required=False)
    p.add_argument("--omegas", default=",".join(f"{w:.2f}" for w in np.linspace(0.0, 0.5, 6)),
                   help="comma-separated omegas in [0, 1] (default 0,0.1,...,0.5)")
    p.add_argument("--alpha-max", type=float, default=DEFAULT_ALPHA_MAX)
    p.add_argument("--xtol", type=float, default=DEFAULT_XTOL)
    p.add_argument("--workers", type=int, default=2, help="processes solving different omegas at once (default 2)")
    p.add_argument("--out", default=None, help="write the figure to this PNG/PDF/SVG file")
    _add_minimizer(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=phase_diagram_cmd)
