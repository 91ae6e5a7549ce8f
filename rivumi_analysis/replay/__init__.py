"""Replay of a run's log: runner-compatible replay and fork seeds (``runner``), the reference
reducer (``reducer``), the cheap proof of replay acceptance (``proof``) and the vectorised
state engine (``vectorised``).

Imports ``read`` and the foundation only. See ``docs/ARCHITECTURE.md``.
"""
