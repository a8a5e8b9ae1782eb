"""Sub-commands ``theory``, ``transition`` and ``phase-diagram`` of the ``attnlab`` CLI."""
from __future__ import annotations

import numpy as np


def _params(args):
    from ..cli import params_from_args

    return params_from_args(args)


def _cmd_theory(args) -> dict:
    from .solver import solve_state_evolution

    res = solve_state_evolution(_params(args), args.alpha, args.branch, tol=args.tol,
                                error_estimate=args.error_estimate, minimizer=args.minimizer)
    return res.to_dict()


def _cmd_transition(args) -> dict:
    from .thresholds import find_transition

    import warnings

    tr = find_transition(_params(args), alpha_max=args.alpha_max, xtol=args.xtol, minimizer=args.minimizer)
    if np.isnan(tr.alpha_c):
        warnings.warn(f"alpha_c: no crossing of the branches' training losses found in [{tr.alpha_min:.3g}, "
                      f"{tr.alpha_max:.3g}] (alpha_c, alpha_l = null)", RuntimeWarning)
    return tr.to_dict()


def _parse_omegas(text: str) -> list:
    try:
        return [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"--omegas must be comma-separated numbers in [0, 1], got {text!r}") from None


def _cmd_phase_diagram(args) -> dict:
    from .thresholds import phase_diagram

    omegas = _parse_omegas(args.omegas)
    if args.out:  # check the output before the long computation
        import matplotlib.pyplot as plt

        from ..cli import check_output

        out = check_output("--out", args.out, folder=False)
        formats = plt.figure().canvas.get_supported_filetypes()
        plt.close("all")
        if out.suffix.lstrip(".").lower() not in formats:
            raise ValueError(f"--out must end in one of {', '.join('.' + f for f in sorted(formats))}, got {args.out!r}")
    rows = [t.to_dict() for t in phase_diagram(_params(args), omegas, alpha_max=args.alpha_max, xtol=args.xtol,
                                                workers=args.workers, progress=not args.json,
                                                minimizer=args.minimizer)]
    if args.out:
        from ..plots import plot_phase_diagram

        plot_phase_diagram(rows, path=args.out)
    return dict(omegas=omegas, alpha_c=[r["alpha_c"] for r in rows], alpha_l=[r["alpha_l"] for r in rows],
                eps_g_linear=[r["eps_g_linear"] for r in rows], out=args.out)


def _add_minimizer(p) -> None:
    p.add_argument("--minimizer", choices=("followed", "global"), default="followed",
                   help="per-sample proximal minimiser: 'followed' (default; the minimum gradient descent reaches "
                        "from the branch's init) or 'global' (the replica global minimum of the paper's Result 4.2)")


def add_cli(sub) -> None:
    """Register ``theory``, ``transition`` and ``phase-diagram``."""
    from ..cli import add_model_arguments

    p = sub.add_parser("theory", help="state-evolution fixed point on a branch")
    add_model_arguments(p)
    p.add_argument("--alpha", type=float, required=True, help="sample complexity n/d > 0")
    p.add_argument("--branch", choices=("semantic", "positional"), default="semantic")
    p.add_argument("--tol", type=float, default=1e-7,
                   help="tolerance on the max-norm of the fixed-point residual, > 0 (default 1e-7)")
    p.add_argument("--error-estimate", action="store_true", help="also report the quadrature error")
    _add_minimizer(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_theory)

    p = sub.add_parser("transition", help="alpha_c and alpha_l for one omega")
    add_model_arguments(p)
    p.add_argument("--alpha-max", type=float, default=3.0)
    p.add_argument("--xtol", type=float, default=1e-3)
    _add_minimizer(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_transition)

    p = sub.add_parser("phase-diagram", help="alpha_c(omega) and alpha_l(omega)")
    add_model_arguments(p, omega_required=False)
    p.add_argument("--omegas", default=",".join(f"{w:.2f}" for w in np.linspace(0.0, 0.5, 6)),
                   help="comma-separated omegas in [0, 1] (default 0,0.1,...,0.5)")
    p.add_argument("--alpha-max", type=float, default=3.0)
    p.add_argument("--xtol", type=float, default=1e-3)
    p.add_argument("--workers", type=int, default=2, help="processes solving different omegas at once (default 2)")
    p.add_argument("--out", default=None, help="write the figure to this PNG/PDF/SVG file")
    _add_minimizer(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=_cmd_phase_diagram)
