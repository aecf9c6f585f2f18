"""Wu et al. (2022), HIP-GP ("Hierarchical inducing point Gaussian process for inter-domain
observations"): whitening cost (Table 1), PCG (Fig. 1), derivative observations (Fig. 2), dust
map from line integrals (Fig. 5), magnetometer regression. Results:
``experiments/wu2022/RESULTS.md``."""
