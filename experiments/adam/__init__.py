"""Adam, Durrande & John, sparse variational generalised additive models: the ANOVA
decomposition of the Friedman function (Sec. 7) and the cost per ELBO evaluation against the
number of components (Table 1). Results: ``experiments/adam/RESULTS.md``."""
