"""State evolution of the attention GLM (Cui et al. 2024, Result 4.2).

Modules, each importing only those above it:

* :mod:`.quadrature`: Gaussian rules, symmetry folding, the rules' settings
  (:class:`Quadrature`, :class:`SplitRule`, :class:`~.quadrature.QMCRule`);
* :mod:`.kernels`: the compiled primitives (teacher, proximal objective, Newton);
* :mod:`.channel`: fields, loss, proximal operator, Moreau envelope, :class:`~.channel.ChannelMoments`;
* :mod:`.split_rule`, :mod:`.followed_rule`: the moments with the global and the followed minimiser;
* :mod:`.equations`: the channel (hat) and ridge-prior (overlap) updates, ``eps_g``, the free entropy;
* :mod:`.solver`: the iterator, from one start to an :class:`SEResult`;
* :mod:`.branches`: where the solver starts and what it does when a start fails
  (:func:`solve_state_evolution`);
* :mod:`.thresholds`: curves, ``alpha_c``, ``alpha_l``, the phase diagram;
* :mod:`.risk_split`: the training loss split into data term and ridge penalty;
* :mod:`.cli`: the ``theory``, ``transition`` and ``phase-diagram`` commands.
"""
from ..parallel import check_numba_threads
from ..params import BRANCHES, DEFAULT_MINIMIZER, MINIMIZERS

check_numba_threads()  # before numba is imported: its import fails on NUMBA_NUM_THREADS=0 without naming it

from .numba_cache import guard_loads, secure_cache_folder  # noqa: E402

secure_cache_folder()  # before any kernel is defined: numba picks its cache folder then

from .branches import OffBranchWarning, solve_state_evolution  # noqa: E402
from .equations import Hats, Overlaps  # noqa: E402
from .quadrature import Quadrature, SplitRule  # noqa: E402
from .solver import ConvergenceWarning, QuadratureWarning, SEResult, StateEvolutionError  # noqa: E402
from .thresholds import Transition, find_transition, linear_baseline_error, phase_diagram, se_curve  # noqa: E402
from .warmup import cached_dispatchers  # noqa: E402

guard_loads(cached_dispatchers())  # a damaged cache entry: compiled again, one warning (not a traceback per solve)

__all__ = ["Hats", "Overlaps", "Quadrature", "SplitRule", "BRANCHES", "MINIMIZERS", "DEFAULT_MINIMIZER",
           "ConvergenceWarning", "OffBranchWarning", "QuadratureWarning", "SEResult", "StateEvolutionError",
           "solve_state_evolution", "Transition", "find_transition", "linear_baseline_error", "phase_diagram",
           "se_curve"]
