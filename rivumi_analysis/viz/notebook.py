"""A run's transcript in a notebook: ``show_run(run_dir)`` (exported as
``rivumi_analysis.show_run``), the same view as the run page's transcript, built from the
same tables (:mod:`rivumi_analysis.viz.transcript`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from ._html import TRANSCRIPT_CSS, visible
from .transcript import Entry, render_text, text_html, transcript_entries, transcript_html

__all__ = ["RunView", "show_run"]


@dataclass
class RunView:
    """One run's transcript for a notebook: rich HTML in Jupyter (``_repr_html_``: no
    script, every run text escaped), plain text elsewhere (``str``/``repr``).

    Attributes:
        run_dir: the run.
        label: its readable label.
        entries: the transcript (:func:`transcript_entries`).
        redact: texts were left out.
    """

    run_dir: str
    label: str
    entries: list[Entry]
    redact: bool = False

    def _repr_html_(self) -> str:
        return (f"<div class=\"rivumi-run\"><style>{TRANSCRIPT_CSS}</style><h3>Run "
                f"{text_html(self.label)}</h3>"
                + transcript_html(self.entries, key="nb", interactive=False) + "</div>")

    def __str__(self) -> str:
        return f"Run {visible(self.label)}\n" + render_text(self.entries)

    def __repr__(self) -> str:
        return self.__str__()

    def frame(self) -> pl.DataFrame:
        """The entries as a DataFrame (kind, title, line_no, sequences, seconds, status;
        titles with controls and lone surrogates :func:`visible`)."""
        return pl.DataFrame([{"kind": e.kind, "title": visible(e.title), "line_no": e.line_no,
                              "sequences": e.sequences, "event_types": e.event_types,
                              "seconds": e.seconds, "status": e.status} for e in self.entries],
                            schema={"kind": pl.Utf8, "title": pl.Utf8, "line_no": pl.Int64,
                                    "sequences": pl.List(pl.Int64),
                                    "event_types": pl.List(pl.Utf8), "seconds": pl.Float64,
                                    "status": pl.Utf8})


def show_run(run_dir: str, *, redact: bool = False) -> RunView:
    """The transcript of the run at ``run_dir`` for a notebook (:class:`RunView`): the same
    view as the run page's transcript, built from the same tables.

    Raises:
        SourceError: ``run_dir`` does not exist, or holds no run.

    >>> v = show_run("tests/fixtures/example/a66038f97f204cb3aaa96339f195c37e")
    >>> print(str(v).splitlines()[2])
    [seq 0 · line 1 · t+0.0s] RUN   Run created
    >>> "<script" in v._repr_html_()
    False
    """
    from ..errors import SourceError
    from . import charts as C
    from .report import _run_dir_of, load_tables, redact_tables

    tables: Mapping[str, pl.DataFrame | None] = load_tables([run_dir], max_depth=0)
    runs = tables["runs"]
    if runs is None or runs.height == 0:
        raise SourceError(f"no run found at {run_dir}", code="no_runs",
                          hint="give a run directory (it holds events.jsonl or session.json)")
    if redact:
        tables = redact_tables(tables)  # type: ignore[arg-type]
    rd = _run_dir_of(run_dir, runs)
    label = C.run_labels(runs.filter(pl.col("run_dir") == rd))["run"][0]
    return RunView(rd, label, transcript_entries(tables, rd, redact=redact), redact)
