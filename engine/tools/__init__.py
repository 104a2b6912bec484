"""The offline commands over a run directory: replay, rescore, export, inspect, report (with its plots and tables),
the end-of-run summary and transcripts, and finding the model folder."""
