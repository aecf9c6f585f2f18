"""Tatzel, Wenger, Schneider & Hennig, IterNCGP ("Accelerating Non-Conjugate Gaussian Processes
By Trading Off Computation For Uncertainty"): Poisson regression (Sec. 5.1), Gaussian-mixture
and MNIST classification (Sec. 5.2), and the cost of conditioning on new data. Results:
``experiments/tatzel/RESULTS.md``."""
