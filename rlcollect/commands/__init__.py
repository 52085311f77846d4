"""The subcommands of ``rlcollect`` (cli.py dispatches): one module each.

    train     Hydra-composed training runs and sweeps (train.py)
    compare   runs and sweeps side by side (compare.py)
    eval      a trained run's policy evaluated again (evaluate.py)
    export    a trained run's policy as a standalone file (export.py)
"""
