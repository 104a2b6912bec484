"""The protocol layer: what every process of a run agrees on (messages, config, transport, paths, errors, keys).

It imports nothing else of ours, so the engine, the rollout workers, the learner and storage can all import it
(tests/test_import_rules.py enforces this).
"""
