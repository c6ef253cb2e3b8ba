"""One CLI vocabulary: one name per concept across the commands, the old names kept as
hidden aliases, and environment defaults by one mechanism (`mlops.commands._options`)."""

import argparse

import pytest

from mlops.cli import build_parser
from mlops.commands._options import ENVIRONMENT, environment_defaults
from mlops.reference.cli import commands

#: (argv with the old name, the attribute it must set, the value expected).
ALIASES = [
    (["pr", "list", "--repo", "R"], "gitops", "R"),
    (["pr", "show", "1", "--repo", "R"], "gitops", "R"),
    (["pr", "approve", "1", "--repo", "R"], "gitops", "R"),
    (["gitops", "show", "--repo", "R"], "gitops", "R"),
    (["gitops", "lint", "--repo", "R"], "gitops", "R"),
    (["canary", "pause", "m", "--repo", "R"], "gitops", "R"),
    (["canary", "status", "m", "--repo", "R"], "gitops", "R"),
    (["rollback", "m", "--repo", "R"], "gitops", "R"),
    (["controller", "run", "--prometheus", "P", "--repo", "R"], "gitops", "R"),
    (["controller", "manifests", "--prometheus", "P", "--repo", "R"], "gitops", "R"),
    (["ui", "--repo", "R"], "gitops", "R"),
    (["ui", "manifests", "--repo", "R"], "gitops", "R"),
    (["pr", "list", "--forge-url", "U"], "forge_api", "U"),
    (["ui", "--forge-url", "U"], "forge_api", "U"),
    (["controller", "run", "--prometheus", "P", "--forge-url", "U"], "forge_api", "U"),
    (["controller", "manifests", "--gitops", "R", "--prometheus", "P", "--forge-url", "U"],
     "forge_api", "U"),
    (["ui", "--insecure"], "argo_insecure", True),
    (["ui", "manifests", "--gitops", "R", "--insecure"], "argo_insecure", True),
    (["workflows", "submit", ".", "--argo-server", "A", "--insecure"], "argo_insecure", True),
    (["promote", "propose", "d", "--gitops", "R", "--forge-url", "U"], "forge_api", "U"),
]

#: Old names that no command shows any more (`workflows lint --repo` is the *model* repo).
RETIRED = ("--forge-url", "--insecure")


@pytest.mark.parametrize("argv,dest,value", ALIASES, ids=[" ".join(a) for a, _, _ in ALIASES])
def test_an_old_name_still_works(argv, dest, value):
    args = build_parser().parse_args(argv)
    assert getattr(args, dest) == value
    new = {"gitops": "--gitops", "forge_api": "--forge-api", "argo_insecure": "--argo-insecure"}
    assert new[dest] in _parser(argv).format_help()


def _parser(argv):
    """The (sub-)parser `argv` reaches."""
    by_path = {path[1:]: parser for path, _, parser in commands(build_parser())}
    words = [w for w in argv if not w.startswith("-")]
    for n in range(len(words), 0, -1):
        if tuple(words[:n]) in by_path:
            return by_path[tuple(words[:n])]
    raise AssertionError(argv)


def test_aliases_are_hidden_from_help():
    """Every alias (help suppressed) is missing from its command's --help, and no command
    shows a retired name or `--repo` for the GitOps repo."""
    hidden = 0
    for path, _, parser in commands(build_parser()):
        text = parser.format_help()
        for option, action in parser._option_string_actions.items():
            if action.help == argparse.SUPPRESS:
                hidden += 1
                assert f"{option} " not in text and f"{option}\n" not in text, (path, option)
            elif option in RETIRED:
                raise AssertionError(f"{' '.join(path)} shows {option}")
            elif option == "--repo":
                assert action.dest != "gitops", path
    assert hidden >= len(ALIASES)


def test_the_gitops_repo_is_gitops_everywhere():
    """Every command that takes the GitOps repo calls it --gitops."""
    with_gitops = [path for path, _, p in commands(build_parser())
                   if "--gitops" in p._option_string_actions]
    for expected in (("pr", "list"), ("gitops", "show"), ("gitops", "lint"), ("canary", "pause"),
                     ("rollback",), ("controller", "run"), ("ui",), ("up",), ("hooks",)):
        assert any(path[1:len(expected) + 1] == expected for path in with_gitops), expected


def test_environment_defaults_apply_when_the_command_runs(monkeypatch):
    """The parser is the same whatever the environment holds (its --help too); the
    variable is read when the command runs, and a flag given wins over it."""
    monkeypatch.delenv("MLOPS_GITOPS_REPO", raising=False)
    plain = build_parser()
    monkeypatch.setenv("MLOPS_GITOPS_REPO", "/from/env")
    assert build_parser().format_help() == plain.format_help()
    args = environment_defaults(plain.parse_args(["canary", "status", "m"]))
    assert args.gitops == "/from/env"
    args = environment_defaults(plain.parse_args(["canary", "status", "m", "--gitops", "/flag"]))
    assert args.gitops == "/flag"
    args = environment_defaults(plain.parse_args(["pr", "list"]),
                                environ={"MLOPS_FORGE": "gitea", "MLOPS_FORGE_API": "U"})
    assert (args.forge, args.forge_api, args.gitops) == ("gitea", "U", None)


def test_manifests_read_no_environment(monkeypatch):
    """What `controller manifests` renders for a cluster never comes from this machine."""
    monkeypatch.setenv("MLOPS_FORGE_REPO", "me/mine")
    args = environment_defaults(build_parser().parse_args(
        ["controller", "manifests", "--gitops", "R", "--prometheus", "P"]))
    assert args.forge_repo is None


def test_no_command_reads_the_environment_by_hand():
    """The variables are in one table; `os.environ.get("MLOPS_` appears in no command."""
    import pathlib

    import mlops.commands

    root = pathlib.Path(mlops.commands.__file__).parent
    for path in root.glob("*.py"):
        assert 'os.environ.get("MLOPS_' not in path.read_text(), path.name
    assert set(ENVIRONMENT.values()) >= {"MLOPS_GITOPS_REPO", "MLOPS_FORGE", "MLOPS_WORKDIR"}


def test_the_canary_actions_share_their_options():
    by_path = {path: p for path, _, p in commands(build_parser())}
    steer = {a: set(by_path[("mlops", "canary", a)]._option_string_actions)
             for a in ("pause", "resume", "abort", "promote", "approve")}
    assert len({frozenset(v) for v in steer.values()}) == 1
    assert {"--gitops", "--branch", "--by", "--workdir"} <= steer["pause"]
    status = set(by_path[("mlops", "canary", "status")]._option_string_actions)
    assert {"--gitops", "--branch", "--json"} <= status


def test_every_command_is_in_exactly_one_group_of_the_help():
    """`mlops --help` lists the commands by what a person does; none twice, none left out
    (`mlops.cli.GROUPS`), and the usage line is still argparse's."""
    from mlops.cli import GROUPS

    parser = build_parser()
    registered = set(parser._subparsers._group_actions[0].choices)
    listed = [name for names in GROUPS.values() for name in names]
    assert sorted(listed) == sorted(registered)
    text = parser.format_help()
    assert text.startswith("usage: mlops [-h] COMMAND ...")
    assert "other:" not in text
    for title in GROUPS:
        assert f"\n{title}:\n" in text
    for name in registered:
        assert sum(line.startswith(f"  {name} ") for line in text.splitlines()) == 1, name
