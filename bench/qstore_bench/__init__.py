"""qstore-bench: the seeds' experiments on pyqstore and its peers (see
cli.py for the command, experiments.py for what is measured and
backends.py for the stores)."""
