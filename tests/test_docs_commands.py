"""The `mlops` commands the README and the documentation site show are the ones that exist.

Every `mlops ...` line of their shell blocks (the README and every page under docs/) is
parsed by the real CLI
parser (an unknown flag or a removed subcommand fails here); the cluster
guide's render, lint and controller-manifests commands are then run as
written, with its own `settings.yaml`, and their output must lint clean.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import shlex

import pytest

from mlops import cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
SAMPLES = {"$URL": "http://127.0.0.1:8080", "$PROM": "http://127.0.0.1:9090",
           "$SHA": "0" * 40, "PORT": "9090"}


def shell_blocks(path: pathlib.Path) -> list[str]:
    return re.findall(r"```(?:bash|sh)\n(.*?)```", path.read_text(), re.S)


def mlops_commands(path: pathlib.Path) -> list[list[str]]:
    """Each `mlops` command of the file's shell blocks as argv (after `mlops`)."""
    found = []
    for block in shell_blocks(path):
        for line in block.replace("\\\n", " ").splitlines():
            for part in line.split(" ; "):
                part = re.split(r"\s+#", part.strip())[0]      # a trailing comment
                part = re.split(r"\s(?:\d?>|&)", part)[0]       # redirections, background
                if not part.startswith("mlops "):
                    continue
                part = re.sub(r"\s\[[^\]]*\]", "", part)        # [optional] parts: usage lines
                part = re.sub(r"(\w+)(\|[\w-]+)+", r"\1", part)  # a|b|c: the first choice
                for name, value in SAMPLES.items():
                    part = part.replace(name, value)
                found.append(shlex.split(part)[1:])
    return found


def exported(path: pathlib.Path) -> set[str]:
    """Variables the file's shell blocks `export` (the commands after them rely on them)."""
    names = set()
    for block in shell_blocks(path):
        for line in block.splitlines():
            if line.strip().startswith("export "):
                names |= set(re.findall(r"(\w+)=", line.split("#")[0]))
    return names


ALL = [(str(path.relative_to(ROOT)), argv) for path in DOCS for argv in mlops_commands(path)]


def test_the_docs_show_commands():
    assert len([a for name, a in ALL if name == "docs/cluster.md"]) >= 10
    assert len([a for name, a in ALL if name.startswith("docs/guides/")]) >= 40
    assert len([a for name, a in ALL if name == "docs/getting-started.md"]) >= 2


@pytest.mark.parametrize("doc, argv", ALL, ids=[" ".join(a[:3]) for _, a in ALL])
def test_each_command_parses(doc, argv, monkeypatch, tmp_path):
    for name in exported(ROOT / doc):
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    parser = cli.build_parser()
    try:
        with contextlib.redirect_stderr(io.StringIO()) as err:
            parser.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{doc}: `mlops {' '.join(argv)}` does not parse: {err.getvalue()}"
                    f" (exit {exc.code})")


def test_the_cluster_guides_render_lint_and_manifests_run_as_written(tmp_path, monkeypatch,
                                                                      capsys):
    text = (ROOT / "docs" / "cluster.md").read_text()
    settings = re.search(r"```yaml\n(# settings\.yaml\n.*?)```", text, re.S)
    assert settings, "the guide's settings.yaml block"
    (tmp_path / "settings.yaml").write_text(settings.group(1))
    # the Argo ConfigMap of section 1, which section 6's lint reads (--argo-config)
    configmap = re.search(r"```yaml\n(# workflow-controller-configmap\n.*?)```", text, re.S)
    assert configmap, "the guide's workflow-controller-configmap block"
    (tmp_path / "workflow-controller-configmap.yaml").write_text(configmap.group(1))
    (tmp_path / "manifests").mkdir()
    # The guide runs from a directory holding the model repo `shapes-detector`.
    (tmp_path / "shapes-detector").symlink_to(ROOT / "examples" / "shapes-detector")
    monkeypatch.chdir(tmp_path)
    commands = mlops_commands(ROOT / "docs" / "cluster.md")
    ran, printed = [], []
    for argv in commands:
        if argv[:2] == ["workflows", "render"] or argv[:2] == ["workflows", "lint"]:
            assert cli.main(argv) == 0, argv
        elif argv[:2] in (["controller", "manifests"], ["ui", "manifests"]):
            printed.append(capsys.readouterr().out)  # what lint said so far
            assert cli.main(argv) == 0, argv
            (tmp_path / "manifests" / f"{argv[0]}.yaml").write_text(capsys.readouterr().out)
        else:
            continue
        ran.append(argv[:2])
    assert ran.count(["workflows", "lint"]) == 3 and ["controller", "manifests"] in ran
    assert ["ui", "manifests"] in ran
    out = "".join(printed) + capsys.readouterr().out
    assert "valid" in out and "problem" not in out
    # What the pipeline's lint reports of the cluster's preconditions (issue 42, item 5):
    # with the guide's executor settings Argo's own containers need nothing more (B6, B8);
    # the namespace needs `privileged` for build-image alone, as section 1's table says;
    # the example ships no lock (B5), and the guide's command says so.
    assert "Argo's executor" not in out, out
    assert "namespace mlops: enforce=privileged" in out
    assert "build-image is privileged: main: seccompProfile Unconfined" in out
    assert "name data/shapes.lock, which is not in" in out
    assert "every container of the documents requests and limits CPU and memory" in out
    rendered = (tmp_path / "manifests" / "pipeline" / "workflowtemplate.yaml").read_text()
    assert "mlops-pull" in rendered and "mlops-git" in rendered  # the settings took effect
