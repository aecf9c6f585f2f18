"""Reproductions of Chang et al. (2023), memory-based dual SVGP."""
