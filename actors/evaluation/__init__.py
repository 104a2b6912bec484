"""Held-out evaluation (`bin/spade-engine eval`, README "Evaluation"): the suites (suites.py), their scorers
(scoring.py), the Reasoning-Gym process and episode shared with the RLVE baseline's plays (rg_worker.py,
rg_process.py, rg_play.py), resumable results (results.py), the side-by-side table (table.py), an eval-only
oracle answerer for tests (oracle.py), the runner (runner.py) and the command line (cli.py `main`)."""
