"""Building blocks of the memory-based dual SVGP (Chang et al. 2023, ICML).

The model class itself lives in :mod:`bo_ncgp.models.dual_svgp`; these submodules hold the
pieces it is made of, one job each:

* :mod:`~bo_ncgp.models.dual.posterior`  -- Eq. 10 predictions from the dual pair, in
  Cholesky form, plus the Woodbury "site block" used by cheap conditioning;
* :mod:`~bo_ncgp.models.dual.sites`      -- per-point sites from the likelihood's
  expectations (Eqs. 7-9, 12) and the damped natural-parameter update (Eqs. 23-24, 54);
* :mod:`~bo_ncgp.models.dual.objective`  -- the hyperparameter objectives Eq. 26 (with the
  Sec. 3.4 memory scaling) and the plain sequential ELBO Eq. 21;
* :mod:`~bo_ncgp.models.dual.inducing`   -- pivoted-Cholesky inducing-point selection and the
  projection of the dual pair (Eq. 27).

Notation used throughout (latents ``L``, inducing points ``m``): the posterior over
``v = K_zz^{-1} u`` is Gaussian with precision ``A = K_zz + B`` and mean ``A^{-1} lam``, where
``lam = sum_i k_zi beta_i y_hat_i`` (first natural parameter, Eq. 7 written in k-space) and
``B = sum_i k_zi beta_i k_zi^T`` (Eq. 11). ``alpha_u = E[u] = K_zz A^{-1} lam`` is the mean of
the inducing outputs that appears in Eq. 10.
"""
