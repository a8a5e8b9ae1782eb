"""Interactive explorers for the book: sliders that re-solve the model live.

Each explorer shows a row of ipywidgets sliders and one matplotlib figure.
The figure is an ordinary ``image/png`` display output with a display id: it
is there for the default values in a static page (the HTML book, a notebook
viewed on GitHub), and in a live kernel (Jupyter, Binder, Colab) each slider
release redraws it in place. The slider panel also carries a ``text/html``
summary of its values, which the static book shows instead of the widget
(that needs a kernel); see ``nb_mime_priority_overrides`` in ``_config.yml``.
In a live front end a script displayed after the panel
(:func:`attnlab.explorer_access.widget_access_script`) names each slider by its
description, draws a focus ring and makes the readout a live region: ipywidgets leaves the
slider handles without a name.

* :func:`se_explorer`: sliders for ``omega, sigma, lambda, alpha``; every move
  solves the state evolution on both branches (the cheap split rule of
  :func:`fast_quadrature`, warm-started from the previous fixed point, a few
  tenths of a second per move) and
  shows the training losses, the test errors and the linear baseline.
* :func:`overlaps_explorer`: the same sliders and solves; the overlaps ``m``, ``theta``
  and ``|Q|^2/d`` of both branches.
* :func:`teacher_explorer`: sliders for ``omega, h*_1, h*_2``; the teacher's
  attention matrix ``T(h*)`` (no solve).

Source of the model: Cui et al. 2024 (arXiv:2402.03902), Sec. 2 and Result 4.2.
"""
from __future__ import annotations

import html
import io
import time
from dataclasses import dataclass, field
from typing import Callable

import matplotlib.pyplot as plt
import numpy as np

from .explorer_access import READOUT_CLASS, WIDGET_CLASS, widget_access_script
from .params import ModelParams
from .plots import plot_attention_matrix, plot_branch_bars

__all__ = ["fast_quadrature", "SEExplorerState", "solve_both_branches", "se_explorer_figure", "se_readout",
           "se_explorer", "overlaps_figure", "overlaps_explorer", "teacher_explorer", "LiveFigure"]


def fast_quadrature():
    """The cheap quadrature used for interactive solves (:meth:`attnlab.theory.quadrature.Quadrature.fast`).

    The split rule at low orders: 0.1-0.3 s per fixed point, with an
    integration error of order 1e-3 on the overlaps (the default
    :class:`attnlab.theory.Quadrature` is the accurate, slower one).

    Returns
    -------
    attnlab.theory.Quadrature
    """
    from .theory import Quadrature

    return Quadrature.fast()


# ----------------------------------------------------------------------------- generic live figure

def _enable_colab_widgets() -> None:
    """ipywidgets >= 8 needs Colab's custom widget manager (no-op elsewhere)."""
    try:
        from google.colab import output  # type: ignore[import-not-found]
    except ImportError:
        return
    output.enable_custom_widget_manager()


def _static_controls_html(title: str, sliders: dict, note: str) -> str:
    rows = []
    for name, w in sliders.items():
        fmt = getattr(w, "readout_format", ".2f")
        rows.append(
            f'<label style="margin-right:1.2em;white-space:nowrap">{html.escape(w.description or name)} '
            f'<input type="range" min="{w.min}" max="{w.max}" step="{w.step}" value="{w.value}" disabled '
            f'style="vertical-align:middle;width:7em"> <code>{format(w.value, fmt)}</code></label>')
    return ('<div class="attnlab-controls" style="border:1px solid #ccc;border-radius:4px;padding:6px 10px;'
            'margin:4px 0;font-size:0.9em">'
            f'<b>{html.escape(title)}</b>: {html.escape(note)}<br>' + " ".join(rows) + "</div>")


class LiveFigure:
    """Sliders plus one figure that is redrawn in place when a slider is released.

    Parameters
    ----------
    sliders : dict of str to ipywidgets.Widget
        Keyword name of ``draw``'s argument -> slider (``continuous_update`` is
        switched off: a redraw happens on release).
    draw : callable
        ``draw(**values) -> matplotlib.figure.Figure``; may raise, the error is
        then shown in the status line and the previous figure stays.
    title : str
        Heading of the panel.
    note : str
        Sentence shown in static pages next to the (disabled) sliders.
    describe : callable, optional
        ``describe(**values) -> str``: the values drawn at the current setting, in words;
        written after every redraw into ``readout``, a ``role="status"`` region (what a
        screen reader reads instead of the picture; see
        :func:`attnlab.explorer_access.widget_access_script`, which also names the sliders).

    Attributes
    ----------
    panel : ipywidgets.VBox
        The sliders, the readout and a status line (DOM class
        :data:`attnlab.explorer_access.WIDGET_CLASS`).
    readout : ipywidgets.HTML
        The text of ``describe`` at the last redraw (empty without ``describe``), HTML-escaped;
        a live region in the page (DOM class :data:`attnlab.explorer_access.READOUT_CLASS`).
    last_seconds : float
        Time of the last redraw.
    """

    def __init__(self, sliders: dict, draw: Callable, title: str, note: str, describe: Callable | None = None):
        import ipywidgets as widgets

        self.sliders, self.draw, self.title, self.note = sliders, draw, title, note
        self.describe = describe
        self.readout = widgets.HTML(value="")
        self.readout.add_class(READOUT_CLASS)
        for w in sliders.values():
            w.continuous_update = False
        self.status = widgets.HTML(value="")
        static = lambda: _static_controls_html(title, sliders, note)

        class _Panel(widgets.VBox):
            def _repr_mimebundle_(self, **kwargs):
                data = super()._repr_mimebundle_(**kwargs)
                if isinstance(data, tuple):
                    data = data[0]
                data = dict(data or {})
                data["text/html"] = static()
                data["text/plain"] = f"{title} (interactive controls: run the notebook to use them)"
                return data

        box = widgets.HBox(list(sliders.values()), layout=widgets.Layout(flex_flow="row wrap"))
        self.panel = _Panel([widgets.HTML(f"<b>{html.escape(title)}</b>"), box, self.readout, self.status])
        self.panel.add_class(WIDGET_CLASS)
        self.handle = None
        self.last_seconds = float("nan")

    def values(self) -> dict:
        """Current slider values."""
        return {k: w.value for k, w in self.sliders.items()}

    def render(self):
        """Draw the figure for the current values, as a PNG image (the pyplot figure is closed).

        Returns
        -------
        IPython.display.Image
            An ``image/png`` output whatever the matplotlib backend (the
            static book and nbval runs may use a non-inline backend).
        """
        from IPython.display import Image

        t0 = time.perf_counter()
        fig = self.draw(**self.values())
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        plt.close(fig)
        self.last_seconds = time.perf_counter() - t0
        if self.describe is not None:
            self.readout.value = html.escape(self.describe(**self.values()))
        return Image(data=buf.getvalue(), format="png")

    def show(self):
        """Display the panel and the figure for the current values; wire the sliders."""
        from IPython.display import display

        _enable_colab_widgets()
        display(self.panel)
        try:
            self.handle = display(self.render(), display_id=True)
            self.status.value = f"<small>drawn in {self.last_seconds:.1f} s</small>"
        except Exception as exc:  # a message in the status line, not a traceback
            self.handle = display(None, display_id=True)
            self.status.value = _error_html(exc)
        for w in self.sliders.values():
            w.observe(self._on_change, names="value")
        display(widget_access_script())
        return self

    def _on_change(self, _change=None):
        self.status.value = "<small>computing&hellip;</small>"
        try:
            fig = self.render()
        except Exception as exc:  # keep the last figure, say what went wrong
            self.status.value = _error_html(exc)
            return
        if self.handle is not None:
            self.handle.update(fig)
        self.status.value = f"<small>drawn in {self.last_seconds:.1f} s</small>"


def _error_html(exc) -> str:
    return f"<small style='color:#b00'>{html.escape(type(exc).__name__)}: {html.escape(str(exc))}</small>"


def _slider(description, value, lo, hi, step, fmt=".2f", name=None):
    """A float slider; ``value`` outside ``[lo, hi]`` raises ``ValueError`` naming ``name``
    (the slider would clamp it silently)."""
    import ipywidgets as widgets

    from .params import check_in_range

    value = check_in_range(name or description, value, lo, hi)

    return widgets.FloatSlider(value=value, min=lo, max=hi, step=step, description=description,
                               readout_format=fmt, continuous_update=False,
                               style={"description_width": "initial"})


# ----------------------------------------------------------------------------- SE explorer

@dataclass
class SEExplorerState:
    """Fixed points of the last solve and the warm starts for the next one.

    Attributes
    ----------
    warm : dict of str to SEResult
        Last converged fixed point per branch (initial point of the next solve).
    results : dict of str to SEResult
        Last results per branch.
    eps_g_linear : float
        Linear-baseline error of the last parameters.
    errors : dict of str to str
        Branches the solver failed on at the last point (every retry raised
        ``StateEvolutionError``), with the message; their ``results`` entry is ``None``.
    """

    warm: dict = field(default_factory=dict)
    results: dict = field(default_factory=dict)
    eps_g_linear: float = float("nan")
    errors: dict = field(default_factory=dict)


def solve_both_branches(params: ModelParams, alpha: float, state: SEExplorerState | None = None,
                        quad=None, tol: float = 1e-6) -> SEExplorerState:
    """State-evolution fixed points on both branches at one ``alpha``.

    Each branch is solved by the policy of :mod:`attnlab.theory.branches`
    (:func:`~attnlab.theory.branches.solve_on_branch`): a warm start from
    ``state.warm``, then the default starts, then, where the cheap rule reaches
    no fixed point on the branch (e.g. the positional branch near where it ends),
    the default starts with the accurate default rule (0.2-0.3 s more;
    ``result.quadrature`` says which rule was used). A result that still has
    ``converged=False`` is returned as it is.

    Parameters
    ----------
    params : ModelParams
    alpha : float
    state : SEExplorerState, optional
        Previous state (updated in place and returned).
    quad : attnlab.theory.Quadrature, optional
        Default :func:`fast_quadrature`.
    tol : float
        Tolerance of the fixed point.

    Returns
    -------
    SEExplorerState
        Where every attempt on a branch raised ``StateEvolutionError`` (warm start,
        cold start, accurate rule), ``results[branch]`` is ``None`` and
        ``errors[branch]`` says why; no exception is raised for it.

    Raises
    ------
    TypeError, ValueError
        Invalid ``params``, ``alpha``, ``quad`` or ``tol`` (before any solve).
    """
    from concurrent.futures import ThreadPoolExecutor

    from .params import check_params, check_positive, check_tolerance
    from .theory import Quadrature, StateEvolutionError, linear_baseline_error
    from .theory.branches import continuable, solve_on_branch, solve_side_by_side
    from .theory.equations import check_quadrature

    check_params(params)
    alpha = check_positive("alpha", alpha)
    tol = check_tolerance("tol", tol)
    state = SEExplorerState() if state is None else state
    quad = fast_quadrature() if quad is None else check_quadrature(quad)

    def solve(branch):  # the result, or the error as a string
        try:
            return solve_on_branch(params, alpha, branch, near=state.warm.get(branch), quad=quad,
                                   fallback=Quadrature(), tol=tol, quiet=True)
        except (StateEvolutionError, FloatingPointError) as exc:
            return f"no fixed point found on the {branch} branch: {exc}"

    branches = ("positional", "semantic")
    with ThreadPoolExecutor(1) as pool:  # the two branches side by side (the kernels release the GIL)
        outcomes = solve_side_by_side(lambda: solve(branches[0]), lambda: solve(branches[1]), pool)
    for branch, res in zip(branches, outcomes):
        state.errors.pop(branch, None)
        if isinstance(res, str):
            state.errors[branch], res = res, None
            state.warm.pop(branch, None)  # (the warm start is what may have led astray)
        state.results[branch] = res
        if res is not None and continuable(res):
            state.warm[branch] = res  # its overlaps, and its Jacobian where the parameters are unchanged
    state.eps_g_linear = linear_baseline_error(params)
    return state


def se_explorer_figure(state: SEExplorerState, params: ModelParams, alpha: float):
    """Two panels: training losses of the branches, test errors against the baseline.

    Parameters
    ----------
    state : SEExplorerState
        Output of :func:`solve_both_branches`.
    params : ModelParams
    alpha : float

    Returns
    -------
    matplotlib.figure.Figure
    """
    ok = {b: r for b, r in state.results.items() if r is not None and np.isfinite(r.eps_t) and np.isfinite(r.eps_g)}
    where = (rf"$\alpha$={alpha:.2f}, $\omega$={params.omega:.2f}, $\sigma$={params.sigma:.2f}, "
             rf"$\lambda$={params.lam:.3f}")
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(7.2, 3.0), constrained_layout=True)
    if not ok:
        for ax in (a1, a2):
            ax.set_axis_off()
        fig.suptitle(where, fontsize=9)
        a1.text(0.0, 0.5, "\n".join(state.errors.values()) or "no fixed point on either branch",
                fontsize=8, color="#b00", wrap=True, va="center")
        return fig
    glob = min(ok, key=lambda b: ok[b].eps_t)
    # the bars start at zero; near alpha_c the two losses differ by a per cent or less, so the
    # title says by how much
    title = "which minimum is lower?"
    if len(ok) == 2:
        title += f" semantic {100 * (ok['semantic'].eps_t / ok['positional'].eps_t - 1):+.1f}%"
    plot_branch_bars({b: r.eps_t for b, r in ok.items()}, ax=a1, highlight=glob,
                     ylabel=r"training loss $\varepsilon_t$", title=title)
    plot_branch_bars({**{b: r.eps_g for b, r in ok.items()}, "linear": state.eps_g_linear}, ax=a2,
                     highlight=glob, ylabel=r"test error $\varepsilon_g$", title="test error")
    beats = ok[glob].eps_g < state.eps_g_linear
    flag = "" if len(ok) == 2 and all(r.converged for r in ok.values()) else "  [not converged]"
    missing = [b for b in ("positional", "semantic") if b not in ok]
    if missing:
        flag = f"  [no {' or '.join(missing)} fixed point]"
    fig.suptitle(f"{where}: lower minimum {glob}"
                 f" ({'beats' if beats else 'does not beat'} the linear baseline){flag}", fontsize=9)
    return fig


def se_explorer(omega: float = 0.3, sigma: float = 0.5, lam: float = 0.01, alpha: float = 1.0, A=None,
                quad=None, show: bool = True) -> LiveFigure:
    """Sliders for ``omega, sigma, lambda, alpha`` that re-solve the state evolution.

    Every slider release solves both branches at the chosen point (warm-started,
    :func:`fast_quadrature` unless ``quad`` is given) and redraws the training
    losses (the lower one fits the training data better) and the test
    errors against the linear positional baseline.

    Parameters
    ----------
    omega, sigma, lam, alpha : float
        Initial slider values.
    A : array_like, shape (2, 2), optional
        Teacher's positional matrix (default ``[[0.6, 0.4], [0.4, 0.6]]``).
    quad : attnlab.theory.Quadrature, optional
    show : bool
        Display at once (in a notebook).

    Returns
    -------
    LiveFigure
        ``.state`` holds the last :class:`SEExplorerState`.

    Raises
    ------
    TypeError, ValueError
        If an initial value is not a number inside its slider's range (``omega``
        in [0, 0.6], ``sigma`` in [0.35, 0.8], ``lam`` in [0.005, 0.05], ``alpha``
        in [0.2, 3]) or ``A`` is invalid; the message names it.
    """
    return _live_se(omega, sigma, lam, alpha, A, quad, se_explorer_figure, "State-evolution explorer",
                    "move a slider to re-solve the state evolution on both branches", show)


def overlaps_figure(state: SEExplorerState, params: ModelParams, alpha: float):
    """Three panels: the overlaps ``m``, ``theta`` and ``|Q|^2/d`` of both branches.

    Parameters as :func:`se_explorer_figure`. Returns a ``matplotlib.figure.Figure``; a branch
    without a fixed point has no bar, and the title names it.
    """
    ok = {b: r for b, r in state.results.items() if r is not None and np.isfinite(r.qnorm)}
    fig, axes = plt.subplots(1, 3, figsize=(7.2, 2.8), constrained_layout=True)
    labels = {"m": r"$m = \mathbf{1}\cdot Q/d$", "theta": r"$\theta = Q^*\cdot Q/d$", "qnorm": r"$|Q|^2/d$"}
    for ax, (name, label) in zip(axes, labels.items()):
        values = {b: abs(getattr(r, name)) if name != "qnorm" else r.qnorm for b, r in ok.items()}
        if values:
            plot_branch_bars(values, ax=ax, ylabel=label)
        else:
            ax.set_axis_off()
    missing = [b for b in ("positional", "semantic") if b not in ok]
    flag = f"  [no {' or '.join(missing)} fixed point]" if missing else ""
    fig.suptitle(rf"overlaps at $\alpha$={alpha:.2f}, $\omega$={params.omega:.2f}, $\sigma$={params.sigma:.2f}, "
                 rf"$\lambda$={params.lam:.3f}{flag}", fontsize=9)
    return fig


def se_readout(state: SEExplorerState, alpha: float) -> str:
    """The values the live explorers draw at ``alpha``, in words (their readout).

    Parameters
    ----------
    state : SEExplorerState
        Output of :func:`solve_both_branches` at ``alpha``.
    alpha : float

    Returns
    -------
    str
        Per branch ``eps_t``, ``eps_g``, ``m``, ``theta`` (or why it has none), and the
        linear baseline's ``eps_g``.
    """
    parts = []
    for branch in ("semantic", "positional"):
        res = state.results.get(branch)
        if res is None:
            parts.append(f"{branch} branch: none ({state.errors.get(branch, 'not solved')})")
        else:
            parts.append(f"{branch} branch: training loss ε_t {res.eps_t:.5f}, test error ε_g {res.eps_g:.5f}, "
                         f"m {res.m:.4f}, θ {res.theta:.4f}" + ("" if res.converged else " (not converged)"))
    return f"At α = {alpha:.2f}: " + "; ".join(parts) + f"; linear baseline ε_g {state.eps_g_linear:.5f}."


def _live_se(omega, sigma, lam, alpha, A, quad, figure, title, status, show):
    """Sliders for ``omega, sigma, lambda, alpha`` whose release solves both branches and draws
    ``figure(state, params, alpha)``: the machinery of :func:`se_explorer` and
    :func:`overlaps_explorer`."""
    state = SEExplorerState()
    # Ranges where the solver converges reliably with the fast rule (very small sigma or
    # large lambda at small alpha can fail; the status line then shows the error).
    sliders = dict(omega=_slider("ω (positional weight)", omega, 0.0, 0.6, 0.05, name="omega"),
                   sigma=_slider("σ (token std)", sigma, 0.35, 0.8, 0.05, name="sigma"),
                   lam=_slider("λ (ridge)", lam, 0.005, 0.05, 0.005, ".3f", name="lam"),
                   alpha=_slider("α = n/d", alpha, 0.2, 3.0, 0.05, name="alpha"))
    ModelParams(A=A)  # an invalid A or quad fails here, not at the first draw
    if quad is not None:
        from .theory.equations import check_quadrature

        check_quadrature(quad)

    def draw(omega, sigma, lam, alpha):
        params = ModelParams(sigma=sigma, lam=lam, omega=omega, A=A)
        solve_both_branches(params, alpha, state, quad=quad)
        return figure(state, params, alpha)

    def describe(omega, sigma, lam, alpha):
        return se_readout(state, alpha)

    live = LiveFigure(sliders, draw, title, status, describe=describe)
    live.state = state
    return live.show() if show else live


def overlaps_explorer(omega: float = 0.3, sigma: float = 0.5, lam: float = 0.01, alpha: float = 1.0, A=None,
                      quad=None, show: bool = True) -> LiveFigure:
    """Sliders for ``omega, sigma, lambda, alpha`` that re-solve the state evolution and draw
    the overlaps ``m``, ``theta``, ``|Q|^2/d`` of both branches (:func:`overlaps_figure`).

    The live counterpart of the kernel-free overlap explorer
    (:func:`attnlab.explorers.overlaps_explorer`), at any point of the slider ranges instead
    of a grid. Parameters, return value and errors as :func:`se_explorer`.
    """
    return _live_se(omega, sigma, lam, alpha, A, quad, overlaps_figure, "Overlap explorer",
                    "move a slider to re-solve the state evolution on both branches", show)


# ----------------------------------------------------------------------------- teacher explorer

def teacher_explorer(omega: float = 0.3, h1: float = 1.0, h2: float = -0.5, A=None, show: bool = True) -> LiveFigure:
    """Sliders for ``omega`` and the teacher projections ``h*_1, h*_2``: the matrix ``T(h*)``.

    Draws the semantic part ``softmax(h* h*^T)``, the positional part ``A``
    and their mixture ``T = (1 - omega) softmax(h* h*^T) + omega A``.

    Parameters
    ----------
    omega, h1, h2 : float
        Initial slider values.
    A : array_like, shape (2, 2), optional
    show : bool

    Returns
    -------
    LiveFigure

    Raises
    ------
    TypeError, ValueError
        If an initial value is outside its slider's range (``omega`` in [0, 1],
        ``h1``, ``h2`` in [-2.5, 2.5]) or ``A`` is invalid.
    """
    from .attention import softmax_attention, teacher_attention

    A_arr = ModelParams(A=A).A_array
    sliders = dict(omega=_slider("ω", omega, 0.0, 1.0, 0.05, name="omega"),
                   h1=_slider("h*₁", h1, -2.5, 2.5, 0.1, name="h1"),
                   h2=_slider("h*₂", h2, -2.5, 2.5, 0.1, name="h2"))

    def draw(omega, h1, h2):
        hstar = np.array([h1, h2])
        fig, axes = plt.subplots(1, 3, figsize=(8.0, 2.8), constrained_layout=True)
        plot_attention_matrix(softmax_attention(hstar[:, None]), ax=axes[0], kind="semantic",
                              title=r"semantic part softmax$(h^* h^{*\top})$")
        plot_attention_matrix(A_arr, ax=axes[1], kind="positional", title=r"positional part $A$")
        plot_attention_matrix(teacher_attention(hstar, omega, A_arr), ax=axes[2], kind=None,
                              title=rf"teacher $T(h^*)$, $\omega$ = {omega:.2f}")
        return fig

    def describe(omega, h1, h2):
        from .explorers import teacher_readout

        return teacher_readout(teacher_attention(np.array([h1, h2]), omega, A_arr))

    live = LiveFigure(sliders, draw, "Teacher attention explorer",
                      "move a slider to redraw the teacher's attention matrix", describe=describe)
    return live.show() if show else live

