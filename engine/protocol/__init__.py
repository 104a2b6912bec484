"""The shared layer: what every process of a run agrees on and reads (the wire: messages, transport, keys,
digests; and the config, paths, errors, placement and seeds every process reads).

It imports nothing else of ours, so the engine, the rollout workers, the learner and storage can all import it
(tests/test_import_rules.py enforces this).
"""
