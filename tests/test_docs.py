"""The documentation: the site builds in strict mode (no broken link, no page missing from the
nav), the generated recipes reference matches the code, every CLI command, built-in component
and shipped recipe is documented, and the README's links resolve."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from emojikit.composition.registry import Registry
from emojikit.ui.cli import cli

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README = REPO / "README.md"


def doc_pages() -> dict[str, str]:
    return {str(p.relative_to(DOCS)): p.read_text(encoding="utf-8") for p in sorted(DOCS.rglob("*.md"))}


def builtin_components():
    return [spec for spec in Registry().components() if spec.distribution == "emojikit"]


def test_site_builds_in_strict_mode(tmp_path):
    pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]'; .ci/run does)")
    pytest.importorskip("material", reason="mkdocs-material is not installed (pip install -e '.[docs]'; .ci/run does)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # material's end-of-life banner, not a build problem
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "reference" / "index.html").is_file()
    assert (tmp_path / "site" / "experiments" / "grpo" / "index.html").is_file()


def test_recipes_reference_matches_the_config_models():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    generated = gen.generate()
    committed = (DOCS / "reference.md").read_text(encoding="utf-8")
    assert committed == generated, "docs/reference.md is out of date with the config models; run: python docs/gen_reference.py"
    # the generator itself covers every loop table and key
    for table, model in gen.loop_models().items():
        assert f"### `[{table}]`" in generated
        for key in model.model_fields:
            assert f"| `{key}` |" in generated, (table, key)


def test_every_cli_command_has_a_section():
    headings = [line for text in doc_pages().values() for line in text.splitlines() if line.startswith("#")]
    missing = [name for name in cli.commands if not any(f"`emojikit {name}`" in h for h in headings)]
    assert not missing, f"CLI commands without a section (a heading `emojikit NAME`) in docs/: {missing}; add one to docs/cli.md"


def test_every_builtin_component_is_documented():
    specs = builtin_components()
    assert {"prompt_source", "teacher", "judge", "reward", "decoder", "backend"} <= {s.kind for s in specs}
    reference = (DOCS / "reference.md").read_text(encoding="utf-8")
    concepts = (DOCS / "concepts.md").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    for spec in specs:
        kind = spec.kind.replace("_", " ")
        assert f"#### `{spec.name}` ({kind})" in reference, f"{kind} {spec.name}: no section in docs/reference.md (run python docs/gen_reference.py)"
        row = next((line for line in concepts.splitlines() if line.startswith(f"| {kind} |")), "")
        assert f"`{spec.name}`" in row, f"{kind} {spec.name}: missing from the components table of docs/concepts.md"
        assert f"`{spec.name}`" in readme, f"{kind} {spec.name}: missing from the README's component table"


def test_every_shipped_recipe_is_documented():
    recipes_page = (DOCS / "recipes.md").read_text(encoding="utf-8")
    readme = README.read_text(encoding="utf-8")
    for path in sorted((REPO / "recipes").glob("*.toml")):
        name = f"`recipes/{path.name}`"
        assert name in recipes_page, f"{name} missing from docs/recipes.md"
        assert name in readme, f"{name} missing from the README's recipe table"


LINK = re.compile(r"\]\(([^)\s]+)\)")


def heading_anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings as the docs site's toc makes them: markup dropped,
    lowercased, characters other than letters, digits, spaces and hyphens dropped, spaces to hyphens."""
    import unicodedata

    anchors, fenced = set(), False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        if fenced or not (m := re.match(r"#{1,6}\s+(.*)", line)):
            continue
        title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))
        title = unicodedata.normalize("NFKD", title.replace("`", "").replace("*", "")).encode("ascii", "ignore").decode("ascii")
        anchors.add(re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", title).strip().lower()))
    return anchors


def test_readme_is_a_front_page_whose_links_resolve():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    local = [target.split("#")[0] for target in LINK.findall(text) if "://" not in target and not target.startswith("#")]
    assert any(t.startswith("docs/") for t in local)
    broken = [t for t in local if t and not (REPO / t).exists()]
    assert not broken, f"README links to missing files: {broken}"
    # an anchor names a heading of its page, as the docs site slugs it (the site's strict build checks its own pages' anchors)
    anchored = [t.split("#", 1) for t in LINK.findall(text) if "://" not in t and "#" in t and t.split("#")[0].endswith(".md")]
    missing = [f"{page}#{anchor}" for page, anchor in anchored if anchor not in heading_anchors(REPO / page)]
    assert not missing, f"README links to headings that are not there: {missing}"
    # the test command the README gives is the one CI runs
    assert "bin/test" in text and re.search(r"^bin/test\s*$", (REPO / ".ci" / "run").read_text(encoding="utf-8"), re.M)


# Words about how the project was made, not about what it does: a reader cannot know "the issue" or "session 4".
INTERNAL = re.compile(r"\bissue \d+|\bsession \d+|\bthis session\b|\bthe issue'?s?\b|\b(?:first|second|third|fourth) round\b", re.I)


def test_docs_speak_to_users():
    pages = {**doc_pages(), "README.md": README.read_text(encoding="utf-8")}
    found = [f"{name}: {m.group(0)!r}" for name, text in pages.items() for m in INTERNAL.finditer(text)]
    assert not found, f"project-internal language in the docs: {found}"
