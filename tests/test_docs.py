"""Every document the code and the docs cite is in the repository.

Comments, docstrings and docs may cite Kafka's own class names and KIP numbers, or a file
of this repository (docs/ARCHITECTURE.md and its siblings). These tests fail when:

- a source, doc, script or Makefile names a ``<Name>.md`` that no file of the repository
  answers to (a bare name may live at the top level or under docs/; a path must resolve
  from the top level or from the citing file, and stay inside the repository);
- a numbered section is cited (``docs/PROTOCOL.md §3``) that the document has no heading for;
- something cites a research note by its number ("seed" and three digits), or a document
  by a capitalised nickname and a rule or item number, neither of which anyone can open;
- a relative link in README.md or docs/*.md points at nothing.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

SCANNED_SUFFIXES = {".py", ".md", ".sh", ".toml"}
SCANNED_NAMES = {"Makefile"}
SKIPPED_DIRS = {"build", "dist", "data", "node_modules", "__pycache__"}

URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+", re.I)
DOC_NAME = re.compile(r"(?<![\w./-])([\w./-]*[\w-]\.md)\b")
SECTION = re.compile(r"([\w./-]*[\w-]\.md)\s*((?:§\s*[\w.]+(?:\s*(?:,|-|and)\s*)?)+)")
SECTION_NUMBER = re.compile(r"§\s*([\w.]+?)(?=[\s,)-]|$|\.\s)")
SEED = re.compile(r"seed[\s_-]*0\d\d", re.I)
# an all-capitals document name without its .md, then a rule, a section or an item number
NICKNAME = re.compile(r"\b[A-Z]{4,}(?!\.md)\s+(?:(?:rule|§)\s*\w+|[A-Z]\d+\b)")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING_NUMBER = re.compile(r"^#+\s+(\d+(?:\.\d+)*)\.?\s", re.M)


def scanned_files(root: Path) -> list[Path]:
    found = []
    for directory, subdirs, files in os.walk(root):
        # prune virtualenvs, caches and build output instead of walking through them
        subdirs[:] = sorted(d for d in subdirs if not d.startswith(".")
                            and d not in SKIPPED_DIRS and not d.endswith(".egg-info"))
        found += [Path(directory, f) for f in sorted(files)
                  if Path(f).suffix in SCANNED_SUFFIXES or f in SCANNED_NAMES]
    return found


def text_of(path: Path) -> str:
    return URL.sub(" ", path.read_text(encoding="utf-8", errors="replace"))


def resolve_doc(root: Path, citing: Path, name: str) -> Path | None:
    """The repository file that `name`, cited in `citing`, means; None if there is none."""
    candidates = [root / name, citing.parent / name]
    if "/" not in name:
        candidates.append(root / "docs" / name)
    for candidate in candidates:
        resolved = candidate.resolve()
        if resolved.is_file() and resolved.is_relative_to(root.resolve()):
            return resolved
    return None


def missing_documents(root: Path) -> list[str]:
    wrong = []
    for path in scanned_files(root):
        for lineno, line in enumerate(text_of(path).splitlines(), 1):
            for name in DOC_NAME.findall(line):
                if resolve_doc(root, path, name) is None:
                    wrong.append(f"{path.relative_to(root)}:{lineno}: {name}")
    return wrong


def section_numbers(doc: Path) -> set[str]:
    return set(HEADING_NUMBER.findall(doc.read_text(encoding="utf-8")))


def missing_sections(root: Path) -> list[str]:
    wrong = []
    for path in scanned_files(root):
        # a citation may wrap ("docs/PROTOCOL.md\n§5"), so look at the text as one line
        text = " ".join(text_of(path).split())
        for name, sections in SECTION.findall(text):
            doc = resolve_doc(root, path, name)
            if doc is None:
                continue  # reported by missing_documents
            have = section_numbers(doc)
            for number in SECTION_NUMBER.findall(sections):
                if number not in have:
                    wrong.append(f"{path.relative_to(root)}: {name} §{number}")
    return wrong


def nickname_citations(root: Path) -> list[str]:
    return [f"{path.relative_to(root)}:{lineno}: {m.group(0)}"
            for path in scanned_files(root)
            for lineno, line in enumerate(text_of(path).splitlines(), 1)
            for pattern in (SEED, NICKNAME) for m in pattern.finditer(line)]


def broken_links(root: Path) -> list[str]:
    docs = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    wrong = []
    for doc in docs:
        if not doc.is_file():
            continue
        for target in LINK.findall(doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
                continue  # a URL or mailto:, or an anchor in the same page
            path = target.split("#", 1)[0]
            resolved = (doc.parent / path).resolve()
            if not resolved.exists() or not resolved.is_relative_to(root.resolve()):
                wrong.append(f"{doc.relative_to(root)}: {target}")
    return wrong


# -- the repository ----------------------------------------------------------------------------

def test_every_cited_document_is_in_the_repository():
    assert missing_documents(ROOT) == []


def test_every_cited_section_has_a_heading():
    assert missing_sections(ROOT) == []


def test_nothing_cites_a_research_note_or_a_document_nickname():
    assert nickname_citations(ROOT) == []


def test_relative_links_in_readme_and_docs_resolve():
    assert broken_links(ROOT) == []


def test_the_docs_the_code_relies_on_exist():
    # the two documents most of the code cites; removing one must fail here by name
    for name in ("ARCHITECTURE.md", "PROTOCOL.md"):
        assert (ROOT / "docs" / name).is_file(), name
    assert {"1", "2", "3", "4", "5", "6", "7"} <= section_numbers(ROOT / "docs" / "PROTOCOL.md")


# -- the checkers themselves, on a small made-up repository --------------------------------------
# (document names below are spelt with {MD} so that this file does not cite them itself)

MD = ".md"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    (tmp_path / "docs").mkdir()
    (tmp_path / "pkg").mkdir()
    (tmp_path / "docs" / f"GUIDE{MD}").write_text(
        f"# Guide\n\n## 1. One\n\n## 2. Two\n\nSee [the readme](../README{MD}).\n")
    (tmp_path / f"README{MD}").write_text(f"Read [the guide](docs/GUIDE{MD}#1-one).\n")
    return tmp_path


def test_the_checkers_accept_a_clean_repository(repo):
    (repo / "pkg" / "mod.py").write_text(
        f'"""Rules: docs/GUIDE{MD} §1 and §2; GUIDE{MD}\n§2; see https://example.org/X{MD}."""\n')
    assert missing_documents(repo) == []
    assert missing_sections(repo) == []
    assert nickname_citations(repo) == []
    assert broken_links(repo) == []


def test_the_checkers_see_each_kind_of_dangling_citation(repo):
    seed, rule, item = "seed", "rule", "C2"
    (repo / "pkg" / "mod.py").write_text(
        f"# layout as in ELSEWHERE{MD}\n"
        f"# wire format: docs/GUIDE{MD} §3\n"
        f"# examples from {seed} 002\n"
        f"# peers: ../shared/docs/NOTES{MD}\n"
        f"# errors are data (NOTES {rule} 7)\n"
        f"# as the checklist says (NOTES {item})\n")
    (repo / "Makefile").write_text(f"# see GONE{MD}\n")
    (repo / "docs" / f"GUIDE{MD}").write_text(
        f"## 1. One\n\n[missing](MISSING{MD}) and ![chart](img/none.png)\n")
    assert missing_documents(repo) == [
        f"Makefile:1: GONE{MD}",
        f"docs/GUIDE{MD}:3: MISSING{MD}",
        f"pkg/mod.py:1: ELSEWHERE{MD}",
        f"pkg/mod.py:4: ../shared/docs/NOTES{MD}",
    ]
    assert missing_sections(repo) == [f"pkg/mod.py: docs/GUIDE{MD} §3"]
    assert nickname_citations(repo) == [f"pkg/mod.py:3: {seed} 002", f"pkg/mod.py:5: NOTES {rule} 7",
                                   f"pkg/mod.py:6: NOTES {item}"]
    assert broken_links(repo) == [f"docs/GUIDE{MD}: MISSING{MD}", f"docs/GUIDE{MD}: img/none.png"]
