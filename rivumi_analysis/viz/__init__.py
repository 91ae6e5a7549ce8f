"""Charts (altair) and the offline HTML report, drawn from the tables.

See ``docs/ARCHITECTURE.md``.
"""
