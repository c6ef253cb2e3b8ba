"""The documentation site builds strictly, and its generated references miss nothing (issue 44).

The site (`mkdocs.yml`, MkDocs + Material) is built the way the README's test command
builds it, `python -m mkdocs build --strict`: a broken link, a link to a missing page or
anchor, or a page left out of the navigation fails the build. The CLI and configuration
reference pages are generated at build time (`scripts/docs_hooks.py`, `mlops.reference`),
so the tests here check the generators against the code they read, each by its own walk:
every command and every flag of the real parsers has an entry in its command's section,
every field of each schema a row, every results file a section.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import yaml

from mlops.cli import build_parser
from mlops.reference import benchmarks, cli, config, schemas

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _mkdocs(config_file: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(config_file), "-d", str(site)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_the_site_builds_strictly_with_its_generated_pages(tmp_path):
    site = tmp_path / "site"
    proc = _mkdocs(ROOT / "mkdocs.yml", site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for page in ("index.html", "getting-started/index.html", "concepts/index.html",
                 "gate/index.html", "guides/evaluation/index.html", "guides/canary/index.html",
                 "cluster/index.html",
                 "security/index.html", "reference/cli/index.html",
                 "reference/mlops-yaml/index.html", "reference/settings/index.html",
                 "reference/canary-policy/index.html", "benchmarks/index.html"):
        assert (site / page).is_file(), page
    cli_page = (site / "reference/cli/index.html").read_text()
    assert 'id="mlops-data-snapshot"' in cli_page and "--if-changed" in cli_page


def _strict_config(tmp_path: pathlib.Path, pages: dict[str, str]) -> pathlib.Path:
    """The site's own settings (theme, validation, extensions) over a docs dir of `pages`,
    without the generated pages: what strictness the project's mkdocs.yml asks for."""
    docs = tmp_path / "docs"
    for name, text in pages.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(text)
    settings = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    settings.pop("hooks")
    settings["docs_dir"] = str(docs)
    settings["nav"] = [{"Home": "index.md"}]
    path = tmp_path / "mkdocs.yml"
    path.write_text(yaml.safe_dump(settings))
    return path


@pytest.mark.parametrize("page, complaint", [
    ("See [the gate](guides/gate.md).", "guides/gate.md"),        # a page that is not there
    ("See [the gate](#no-such-heading).", "no-such-heading"),     # an anchor that is not there
    ("See [the Dockerfile](../Dockerfile).", "../Dockerfile"),    # outside the site
])
def test_a_broken_link_fails_the_strict_build(tmp_path, page, complaint):
    proc = _mkdocs(_strict_config(tmp_path, {"index.md": f"# Home\n\n{page}\n"}),
                   tmp_path / "site")
    assert proc.returncode != 0 and complaint in proc.stdout + proc.stderr


def test_a_page_missing_from_the_navigation_fails_the_strict_build(tmp_path):
    proc = _mkdocs(_strict_config(tmp_path, {"index.md": "# Home\n", "lost.md": "# Lost\n"}),
                   tmp_path / "site")
    assert proc.returncode != 0 and "lost.md" in proc.stdout + proc.stderr


def _sections(markdown: str) -> dict[str, str]:
    """{anchor: the text of its section} of a generated page (`## ... {#anchor}`)."""
    parts = re.split(r"^#{2,3} .*\{#([a-z0-9-]+)\}$", markdown, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2]))


def _parsers(parser: argparse.ArgumentParser, path: tuple[str, ...]):
    """Every parser of the CLI with its command path, walked here on its own."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _parsers(sub, (*path, name))


def test_every_command_and_flag_of_the_cli_has_a_reference_entry():
    sections = _sections(cli.markdown())
    seen = 0
    walked = list(_parsers(build_parser(), ("mlops",)))
    walked += [(("mlops", "step", name), p) for name, p in cli.step_parsers().items()]
    for path, parser in walked:
        anchor = "-".join(path)
        assert anchor in sections, f"`{' '.join(path)}` has no section in the CLI reference"
        text = sections[anchor]
        for option in parser._option_string_actions:
            if option in ("-h", "--help"):
                continue
            if parser._option_string_actions[option].help == argparse.SUPPRESS:
                continue
            assert f"`{option}" in text, f"`{' '.join(path)}`: {option} is not in its entry"
            seen += 1
        for action in parser._get_positional_actions():
            if isinstance(action, argparse._SubParsersAction):
                for name in action.choices:
                    assert f"`{name}`" in text, f"`{' '.join(path)}`: {name} not listed"
                continue
            assert f"`{action.metavar or action.dest}`" in text, (path, action.dest)
            seen += 1
    assert seen > 300  # the walk found the CLI's flags


def test_the_exit_codes_are_the_enum():
    from contracts.errors import ExitCode

    table = dict(re.findall(r"^\| (\d) \| ([a-z ]+):", cli.exit_codes_markdown(), re.M))
    assert table == {str(int(code)): code.name.lower().replace("_", " ") for code in ExitCode}


def _properties(schema: dict) -> list[tuple[str, str]]:
    """(object, field) for the root's and every definition's fields."""
    out = [("", name) for name in schema.get("properties", {})]
    for def_name, node in schema.get("$defs", {}).items():
        out += [(def_name, name) for name in node.get("properties", {})]
    return out


@pytest.mark.parametrize("name", schemas.NAMES)
def test_every_field_of_each_configuration_file_has_a_reference_row(name):
    page = config.markdown(name)
    schema = schemas.generate(name)
    for owner, field in _properties(schema):
        if name == "mlops.yaml" and owner in schemas.generate("canary-policy").get("$defs", {}):
            continue  # the canary policy's own page lists those
        if name == "mlops.yaml" and owner == "CanaryPolicy":
            continue
        assert f"| `{field}` |" in page, f"{name}: {owner or 'top level'}.{field} has no row"


def test_the_field_words_come_from_the_source():
    page = config.markdown("canary-policy")
    # an attribute docstring, a comment above a field, a comment at the end of its line
    assert "Renamed images of one class a harmless retrain may reach." in page
    settings = config.markdown("settings")
    assert "GitHub organisation or user of the model repos" in settings
    assert "Flagger's default" in page


def test_every_results_file_has_a_section_on_the_benchmarks_page():
    page = benchmarks.markdown(ROOT)
    for result in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        anchor = result.stem.replace("_", "-")
        assert f"{{#{anchor}}}" in page, result.name
        data = json.loads(result.read_text())
        first = next(iter(data)) if isinstance(data, dict) else None
        assert first is None or f"`{first}" in page
    scripts = sorted((ROOT / "benchmarks").glob("*.py"))
    assert benchmarks.script_for(ROOT / "benchmarks/results/fleet_before.json",
                                 scripts).name == "fleet.py"
