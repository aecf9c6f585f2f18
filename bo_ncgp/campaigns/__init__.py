"""Generic BO / active-learning campaigns: ask/tell loop, checkpoint + resume, progress,
results files, summaries and plots (mean +- s.e. over seeds), evaluation through any
``concurrent.futures.Executor``."""

from bo_ncgp.campaigns.executors import InlineExecutor, make_executor
from bo_ncgp.campaigns.plotting import best_so_far, collect, plot_campaigns, summarise
from bo_ncgp.campaigns.runner import Campaign, run_seed, run_seeds
from bo_ncgp.campaigns.stats import mean_se
from bo_ncgp.campaigns.strategies.base import History, RandomSearch, Strategy

__all__ = [
    "Campaign",
    "History",
    "InlineExecutor",
    "RandomSearch",
    "Strategy",
    "best_so_far",
    "collect",
    "make_executor",
    "mean_se",
    "plot_campaigns",
    "run_seed",
    "run_seeds",
    "summarise",
]
