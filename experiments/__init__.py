"""Paper reproductions built on :mod:`bo_ncgp`, one subpackage per paper.

* :mod:`experiments.chang2023` -- Chang et al. (2023), memory-based dual SVGP: banana, streaming
  UCI, split MNIST, magnetic anomalies, timing, hotspot active learning, lunar lander;
* :mod:`experiments.tatzel` -- Tatzel et al., IterNCGP: Poisson regression, Gaussian mixture,
  MNIST, conditioning cost;
* :mod:`experiments.wu2022` -- Wu et al. (2022), HIP-GP: whitening, PCG, derivatives, dust map,
  magnetometer;
* :mod:`experiments.adam` -- Adam et al., sparse GAM: Friedman ANOVA decomposition, cost per
  ELBO evaluation;
* :mod:`experiments.harness` -- output folders, options, JSON results, resume, seed summaries.

Every experiment module has ``main(argv) -> int``, runs as ``python -m experiments.<paper>.<name>``
and as a ``bo-ncgp`` command (entry-point group ``bo_ncgp.commands`` in ``pyproject.toml``).
Each paper's measured results are in ``experiments/<paper>/RESULTS.md``.
"""
