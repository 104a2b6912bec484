"""Reasoning-Gym problems, for training (the RLVE baseline's plays) and evaluation (rg-hard): a separate process
that holds the datasets and scores answers (worker.py, with resource limits; process.py its client, with
timeouts), and one problem played as a short chat episode (play.py)."""
