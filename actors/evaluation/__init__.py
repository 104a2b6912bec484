"""Held-out evaluation (`bin/spade-engine eval`, README "Evaluation"): the suites (suites.py), their scorers
(scoring.py), resumable results (results.py), the side-by-side table (table.py), paired comparisons of models on
one probe (paired.py), eval-only backends that reply with a text of their own (replying.py: the oracle for tests,
oracle.py; the chance players, chance.py), the runner (runner.py) and the command line (cli.py `main`). The
Reasoning-Gym process and episode it shares with the RLVE baseline's training plays are actors/reasoning_gym/."""
