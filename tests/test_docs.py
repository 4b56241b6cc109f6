"""The documentation: README.md, docs/ and benchmarks/ (results, journal) link only to what exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bakeoff.components.defaults import CONFIG as DEFAULT_CONFIG
from bakeoff.components.spec import load_variants

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PAGES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benchmarks" / "results.md",
    ROOT / "benchmarks" / "journal.md",
]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")
EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)  # http:, https:, mailto:


def prose(page: Path) -> str:
    """The page without its code blocks and inline code, where brackets are not links."""
    return INLINE_CODE.sub("", FENCE.sub("", page.read_text()))


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings: lower case, punctuation dropped, spaces as '-', repeats
    numbered."""
    seen: dict[str, int] = {}
    found = set()
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return found


def relative_links(page: Path) -> list[str]:
    return [target for target in LINK.findall(prose(page)) if not EXTERNAL.match(target)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file_and_its_heading(page: Path) -> None:
    broken = []
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no file {linked.relative_to(ROOT) if linked.is_relative_to(ROOT) else linked}")
        elif anchor and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with anchor #{anchor} in {linked.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)} links to what does not exist:\n" + "\n".join(broken)


def test_readme_leads_to_every_page_of_docs() -> None:
    linked = {(ROOT / target.partition("#")[0]).resolve() for target in relative_links(ROOT / "README.md")}
    unlinked = [page.name for page in PAGES if page.parent == ROOT / "docs" and page not in linked]
    assert not unlinked, f"README.md links to none of {unlinked}"


def test_readme_is_a_landing_page_that_starts_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150, "README.md is the landing page: the rest goes to docs/"
    first_block = text.split("```")[1]
    assert [line.split()[:2] for line in first_block.strip().splitlines()] == [["make", "run"], ["make", "test"]]


def test_the_first_run_trains_the_default_files_baselines_with_the_command_its_file_names() -> None:
    """README's first run is a short version of the default bake-off: its three baselines, as the default file has
    them."""
    readme_runs = re.findall(r'^make run ARGS="(.+)"', (ROOT / "README.md").read_text(), re.M)
    assert len(readme_runs) == 1, "README shows one first run"
    (config,) = re.findall(r"--config (\S+)", readme_runs[0])
    assert f'make run ARGS="{readme_runs[0]}"' in (ROOT / config).read_text(), (
        f"{config} names the command README shows"
    )
    quick = {variant.name: variant.model_config() for variant in load_variants(ROOT / config)}
    baselines = {variant.name: variant.model_config() for variant in load_variants(DEFAULT_CONFIG)[:3]}
    assert quick == baselines
