"""Test-data generation: the runner's write protocol (``writer``), the scenario catalog and
``sample_runs/`` (``scenarios``), crash cuts from real kills (``crash``, ``crash_child``),
benchmark corpora (``corpus``), and the relayflowd journal writer, scenarios and crash cuts
(``relayflowd``, ``relay_scenarios``, ``relay_crash``).

Nothing in the analysis side imports this package (tests and ``python -m`` entry points do).
See ``docs/ARCHITECTURE.md``.
"""
