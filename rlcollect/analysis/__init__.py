"""The comparison of runs: ``rlcollect compare`` (docs/compare.md). Reads the run records of
rlcollect.logging (run folders) and W&B offline runs; rlcollect.logging imports nothing of it.

    api.py            the entry point and one import: compare_runs (the command: load, compare, render,
                      plot) and the public names of the modules below
    comparison.py     the numbers: compare(runs) -> Comparison, runs left out, mean ± std rows, interval
                      estimates
    grouping.py       group_runs: runs that differ only by seed are one group
    stats.py          interval estimators on arrays of run scores (IQM, ..., stratified bootstrap)
    report.py         a Comparison as text: table, markdown, csv, json, html
    plots.py          a Comparison's figures: learning curves, performance profile, P(X > Y)
    wandb_runs.py     W&B offline runs as RunRecords (compare --wandb), read by rlcollect.logging.wandb_offline

    compare.py        deprecated: api.py's old name, its names warn and resolve there (rlcollect/moved.py)
    wandb_offline.py  deprecated: moved to rlcollect.logging.wandb_offline

Imports go down this list's reverse: api.py imports the others; report.py imports plots.py;
plots.py and comparison.py import grouping.py and stats.py.
Importing this package imports nothing; its modules do not import torch.
"""
