"""The README and docs/ point at things that exist: every relative link's file, every `#anchor`
a heading of its page, every image; and the README stays a first page (at most 150 lines).
External links (http, mailto) are not fetched: the suite has no network."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "cluster" / "README.md", ROOT / "benchmarks" / "RESULTS.md"]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
README_MAX_LINES = 150


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", text, re.M)}


def broken_links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text())
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not fetched
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            out.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file):
            out.append(f"{page.relative_to(ROOT)}: {target} (no heading #{anchor} in {file.relative_to(ROOT)})")
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_the_checker_finds_a_missing_file_and_a_missing_anchor(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n## Where to go\n\n[ok](#where-to-go) [gone](b.md) [bad](a.md#nowhere)\n"
                                   "```\n[in code](ignored.md)\n```\n[web](https://example.com/x)\n")
    page = tmp_path / "a.md"
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        assert broken_links(page) == ["a.md: b.md (no such file)", "a.md: a.md#nowhere (no heading #nowhere in a.md)"]
    finally:
        ROOT = saved


def test_the_readme_is_a_first_page_with_the_picture_of_what_comes_out():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES
    assert "(docs/images/pareto.png)" in text and (ROOT / "docs" / "images" / "pareto.png").is_file()
    assert "make demo" in text and "make test" in text and "import drydock" in text
