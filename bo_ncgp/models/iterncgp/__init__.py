"""IterNCGP: computation-aware Laplace inference for non-conjugate GPs.

Tatzel, Wenger, Schneider & Hennig, "Accelerating Non-Conjugate Gaussian Processes By Trading
Off Computation For Uncertainty" (workshop version: "IterGLM").

* :mod:`.model` -- :class:`IterNCGP`, the user-facing model (fit / predict / condition);
* :mod:`.newton` -- Algorithm 1, Newton's method as a sequence of GP regressions;
* :mod:`.problem` -- pseudo targets and noise ``W^{-1}`` / ``W^+`` of one Newton step (Eq. 6);
* :mod:`.itergp` -- Algorithm 2, IterGP with a virtual solver run;
* :mod:`.policies` -- actions: :class:`CGPolicy`, :class:`JacobiCGPolicy`,
  :class:`CovariancePolicy`, :class:`UnitVectorPolicy`;
* :mod:`.belief` -- belief over the representer weights and its update (Eqs. 8-10);
* :mod:`.stopping` -- inner / outer stopping criteria (Sec. B.2);
* :mod:`.linesearch` -- step-size control of the Newton steps (extension);
* :mod:`.recycling` -- Algorithm 3, virtual solver run with compression;
* :mod:`.operators` -- products with the block-diagonal prior covariance of C latent GPs.
"""

from bo_ncgp.models.iterncgp.belief import Belief, BeliefUpdate
from bo_ncgp.models.iterncgp.itergp import IterGPResult, itergp
from bo_ncgp.models.iterncgp.linesearch import backtracking_step, log_posterior
from bo_ncgp.models.iterncgp.model import IterNCGP, RatePrediction
from bo_ncgp.models.iterncgp.newton import (
    LaplaceState,
    NewtonConfig,
    NewtonStepInfo,
    newton_laplace,
)
from bo_ncgp.models.iterncgp.operators import LatentKernelOperator
from bo_ncgp.models.iterncgp.policies import (
    CGPolicy,
    CovariancePolicy,
    JacobiCGPolicy,
    Policy,
    UnitVectorPolicy,
    make_policy,
)
from bo_ncgp.models.iterncgp.problem import PseudoRegressionProblem, null_space_projection
from bo_ncgp.models.iterncgp.recycling import (
    ActionBuffers,
    RecycledBelief,
    virtual_solver_run,
)
from bo_ncgp.models.iterncgp.stopping import (
    AnyOf,
    MaxIterations,
    RelativeChange,
    ResidualNorm,
    SolverState,
    StoppingCriterion,
)

__all__ = [
    "ActionBuffers",
    "AnyOf",
    "Belief",
    "BeliefUpdate",
    "CGPolicy",
    "CovariancePolicy",
    "IterGPResult",
    "IterNCGP",
    "JacobiCGPolicy",
    "LaplaceState",
    "LatentKernelOperator",
    "MaxIterations",
    "NewtonConfig",
    "NewtonStepInfo",
    "Policy",
    "PseudoRegressionProblem",
    "RatePrediction",
    "RecycledBelief",
    "RelativeChange",
    "ResidualNorm",
    "SolverState",
    "StoppingCriterion",
    "UnitVectorPolicy",
    "backtracking_step",
    "itergp",
    "log_posterior",
    "make_policy",
    "newton_laplace",
    "null_space_projection",
    "virtual_solver_run",
]
