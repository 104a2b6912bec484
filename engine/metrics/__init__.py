"""What a run measures: the metrics.jsonl rows, the curriculum signals, the trackers and the live terminal view."""
