"""Generic BO / active-learning campaigns: ask/tell loop, checkpoint + resume, progress,
results files, plots, evaluation through any ``concurrent.futures.Executor``."""

from bo_ncgp.campaigns.executors import InlineExecutor, make_executor
from bo_ncgp.campaigns.plotting import best_so_far, collect, plot_campaigns, summarise
from bo_ncgp.campaigns.runner import Campaign
from bo_ncgp.campaigns.strategy import History, RandomSearch, Strategy

__all__ = [
    "Campaign",
    "History",
    "InlineExecutor",
    "RandomSearch",
    "Strategy",
    "best_so_far",
    "collect",
    "make_executor",
    "plot_campaigns",
    "summarise",
]
