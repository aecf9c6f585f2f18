"""Chang et al. (2023), "Memory-based dual Gaussian processes for sequential learning":
streaming banana (Fig. 1), streaming UCI (Table 1), split MNIST (Tables 2-3), magnetic
anomalies (Fig. 5), NLPD against wall-clock time (Fig. 7), hotspot active learning (Fig. 4) and
lunar-lander batch BO. Results: ``experiments/chang2023/RESULTS.md``."""
