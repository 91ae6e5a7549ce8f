"""One module per table: what a row is, how rows are built from events, and its ``*_df``
loader (``_common`` holds what every table shares: frame building, validation, the loader flow).

Imports ``audit``, ``resume``, ``replay``, ``read`` and the foundation. See
``docs/ARCHITECTURE.md``.
"""
