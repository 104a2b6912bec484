"""The coordinator: one engine process per run. Its rooms, each importing only those before it
(tests/test_import_rules.py): `protocol` (the shared layer every process reads: the wire, the config, paths,
errors), `peers` and `metrics` (the workers and learner as the engine sees them; what a run measures), the loop's
stages (run.py driving refresh, plays, batches, designer_reward), `tools` (the offline commands over a run
directory) and `cli` (the `spade-engine` command). It never imports torch, actors or learner."""
