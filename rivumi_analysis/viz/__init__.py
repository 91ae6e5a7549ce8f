"""Charts (altair) and the offline HTML report, drawn from the tables.

``rivumi_analysis.charts`` stays importable (it re-exports :mod:`rivumi_analysis.viz.charts`).
See ``docs/ARCHITECTURE.md``.
"""
