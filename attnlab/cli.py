"""Command-line interface: ``attnlab train | theory | transition | phase-diagram | counting``.

Every sub-command prints a readable summary, or one JSON object with ``--json``.
Invalid input prints one line ``attnlab: error: ...`` and exits with code 2; a
problem of the environment (an output folder that cannot be written, a missing
optional package, SIGTERM or Ctrl-C) one line and exit code 1.
"""
from __future__ import annotations

import argparse
import importlib
import json
import math
import signal
import sys
import tempfile
import warnings
from pathlib import Path

from .params import DEFAULT_A, INITS, METHODS, ModelParams

__all__ = ["main", "build_parser", "check_output"]


def _parse_A(text: str):
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--A must be four comma-separated numbers a11,a12,a21,a22, got {text!r}")
    if len(vals) != 4:
        raise argparse.ArgumentTypeError(f"--A must be four comma-separated numbers a11,a12,a21,a22, got {text!r}")
    return ((vals[0], vals[1]), (vals[2], vals[3]))


def add_model_arguments(p: argparse.ArgumentParser, omega_required: bool = True) -> None:
    """Add ``--omega --sigma --lam --A`` to a sub-command parser."""
    p.add_argument("--omega", type=float, required=omega_required, default=None if omega_required else 0.3,
                   help="positional weight of the teacher, in [0, 1]")
    p.add_argument("--sigma", type=float, default=0.5, help="token content std (default 0.5)")
    p.add_argument("--lam", type=float, default=0.01, help="ridge strength lambda >= 0 (default 0.01)")
    p.add_argument("--A", type=_parse_A, default=DEFAULT_A,
                   help="teacher positional matrix a11,a12,a21,a22 (default 0.6,0.4,0.4,0.6)")


def params_from_args(args, rank: int = 1) -> ModelParams:
    """Build :class:`ModelParams` from parsed ``--omega --sigma --lam --A``."""
    return ModelParams(sigma=args.sigma, lam=args.lam, omega=args.omega, A=args.A, r=rank)


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


def _cmd_train(args) -> dict:
    from .simulation import run_simulation

    params = params_from_args(args, rank=args.rank)
    res = run_simulation(params, args.alpha, args.d, init=args.init, seed=args.seed, method=args.method,
                         steps=args.steps, lr=args.lr, n_test=args.n_test, dtype=args.dtype,
                         device=args.device, progress=not (args.json or args.no_progress))
    if not res.converged:  # the budget asked for ended first: a result, with a warning (exit 3 with --strict)
        warnings.warn(f"not converged: {res.steps} steps of {res.method} ended with gradient rms {res.grad_rms:.2g} "
                      f"> gtol 1e-9 (converged: false; more --steps or --method lbfgs to converge)", RuntimeWarning)
    return res.to_dict()


def _add_train(sub) -> None:
    p = sub.add_parser("train", help="train the attention student at finite d (ERM)")
    add_model_arguments(p)
    p.add_argument("--alpha", type=float, required=True, help="sample complexity n/d > 0")
    p.add_argument("--d", type=int, required=True, help="embedding dimension >= 2")
    p.add_argument("--init", choices=INITS, default="random")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rank", type=int, default=1)
    p.add_argument("--method", choices=METHODS, default="gd")
    p.add_argument("--steps", type=int, default=None, help="step budget (method default)")
    p.add_argument("--lr", type=float, default=None, help="learning rate (method default)")
    p.add_argument("--n-test", type=int, default=20_000, help="fresh test samples (default 20000)")
    p.add_argument("--dtype", choices=("float64", "float32"), default="float64")
    p.add_argument("--device", default="cpu")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--strict", action="store_true",
                   help="exit with code 3 if the optimiser did not converge (default: exit 0 with a warning)")
    p.set_defaults(func=_cmd_train)


#: Modules that register further sub-commands with an ``add_cli(subparsers)`` function,
#: and the sub-commands each registers (so that ``attnlab theory ...`` does not import
#: the counting module, and with it torch: 2.5 s).
_PLUGINS = {"attnlab.theory.cli": ("theory", "transition", "phase-diagram"), "attnlab.counting": ("counting",),
            "attnlab.reproduce": ("reproduce",)}


class _OneLineErrorParser(argparse.ArgumentParser):
    """Argument parser whose usage errors are one line (exit code 2)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The argument parser of the ``attnlab`` command (with ``command``, a
    sub-command a plugin registers: only that plugin's sub-commands and ``train``)."""
    parser = _OneLineErrorParser(prog="attnlab", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_train(sub)
    plugins = [name for name, commands in _PLUGINS.items() if command in commands] or list(_PLUGINS)
    for name in plugins:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue
        module.add_cli(sub)
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


def _interrupted(signum, frame):
    raise KeyboardInterrupt(signal.Signals(signum).name)


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
    try:
        return _main(argv)
    except KeyboardInterrupt as exc:  # (also while importing)
        print(f"attnlab: error: interrupted by {exc or 'SIGINT'}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt_in(exc: BaseException) -> BaseException | None:
    """The KeyboardInterrupt that caused ``exc`` (e.g. SIGTERM inside a compiled
    numba function surfaces as a SystemError), or ``None``."""
    while exc is not None:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        exc = exc.__cause__ or exc.__context__
    return None


def _main(argv) -> int:
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = args.func(args)
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
    if getattr(args, "json", False):
        print(json.dumps(_json_safe(result), allow_nan=False))
    else:
        _print_summary(result)
    not_converged = isinstance(result, dict) and result.get("converged") is False
    return 3 if not_converged and getattr(args, "strict", True) else 0


if __name__ == "__main__":
    sys.exit(main())
