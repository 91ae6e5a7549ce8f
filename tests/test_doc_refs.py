"""Every section reference (§N) in the code, messages, README, notebooks, tests, fixture and
sample READMEs and benchmarks points into the project's own docs: docs/run-format.md, or
docs/relayflowd-journal.md when written ``journal §N`` / ``relayflowd-journal.md §N``; nothing
cites the external spec any more, and no path to those docs dangles."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import ROOT

REF = re.compile(r"(journal |relayflowd-journal\.md )?§(\d+(?:\.\d+)?)")
# a range end without its own § (like "8.2-13.3") would go unchecked: require §A–§B
BARE_RANGE_END = re.compile(r"§\d+(?:\.\d+)?\s?[-–]\s?\d")
DOC_PATH = re.compile(r"((?:\.\.?/|[\w.-]+/)+)(run-format|relayflowd-journal)\.md")
HEAD = re.compile(r"^#+ (\d+(?:\.\d+)?)\.? ", re.M)
PATTERNS = ("README.md", "CHANGELOG.md", "docs/*.md", "rivumi_analysis/**/*.py",
            "benchmarks/**/*.py", "benchmarks/**/*.md", "notebooks/*.ipynb", "notebooks/*.py",
            "scripts/**/*.py", "tests/**/*.py", "tests/**/*.md", "sample_runs/README.md",
            "sample_runs/*/README.md")
JOURNAL_DOC = "docs/relayflowd-journal.md"  # its own bare §N are journal sections


def _sections(doc: str) -> set[str]:
    return set(HEAD.findall((ROOT / "docs" / doc).read_text("utf-8")))


def _files() -> list[Path]:
    out: set[Path] = set()
    for pattern in PATTERNS:
        out.update(p for p in ROOT.glob(pattern) if ".venv" not in p.parts and p.is_file())
    return sorted(out)


def _where(path: Path, text: str, pos: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, pos) + 1}"


def test_the_scan_covers_every_folder() -> None:
    rel = {str(p.relative_to(ROOT)) for p in _files()}
    for must in ("rivumi_analysis/synth/writer.py", "notebooks/03_repeat_guards_and_budgets.ipynb",
                 "tests/fixtures/README.md", "tests/fixtures/relayflowd/README.md",
                 "benchmarks/README.md", "benchmarks/bench.py", "sample_runs/README.md",
                 "sample_runs/relayflowd/README.md", "CHANGELOG.md", "docs/run-format.md"):
        assert must in rel, must


def test_every_reference_resolves_in_our_docs() -> None:
    run_format, journal = _sections("run-format.md"), _sections("relayflowd-journal.md")
    assert {"8.1", "9.6", "10.3", "11.1"} <= run_format and {"7.1", "8"} <= journal
    bad = []
    for path in _files():
        text = path.read_text("utf-8")
        in_journal_doc = str(path.relative_to(ROOT)) == JOURNAL_DOC
        for m in REF.finditer(text):
            doc = journal if (m.group(1) or in_journal_doc) else run_format
            if m.group(2) not in doc:
                bad.append(f"{_where(path, text, m.start())}: {m.group(0)} (no such section)")
        for m in BARE_RANGE_END.finditer(text):
            bad.append(f"{_where(path, text, m.start())}: {m.group(0)} (write §A–§B)")
        for m in DOC_PATH.finditer(text):
            rel = m.group(0)
            if not ((ROOT / rel).is_file() or (path.parent / rel).is_file()):
                bad.append(f"{_where(path, text, m.start())}: {rel} (no such file)")
    assert not bad, "\n".join(bad)


def test_nothing_cites_the_external_spec() -> None:
    for path in _files():
        if path.name == "test_doc_refs.py":
            continue
        text = path.read_text("utf-8")
        assert not re.search(r"shared/spec/(run-format|relayflowd-journal)", text), path
        assert not re.search(r"\bspec §", text), path
