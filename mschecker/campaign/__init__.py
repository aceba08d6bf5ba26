"""Regression campaigns: a declared matrix of checks (TOML), run as tasks on Dask distributed, recorded in a
SQLite store, and compared with a baseline run (docs/CAMPAIGN.md).

Modules, one concept each: spec (the campaign file and its cells), cells (what a worker does with one cell),
shipping (a check cell's files sent to workers once), engine (the Dask adapter: submit, timeout, dead workers),
store (SQLite, versioned schema), runner (`campaign run` as a call), compare (verdicts against a baseline),
report (Rich, JSON, HTML with plots).
"""
