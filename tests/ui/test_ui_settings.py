"""The UI's options have one owner (`mlops/ui/settings.py`): what `mlops ui` refuses,
`mlops ui manifests` refuses before rendering it into the pod's `mlops ui`.

Before, `ui manifests --port 99999` rendered a containerPort no API server accepts, and
`--token-identity` with a control character rendered a `--by` the pod's `mlops ui` refuses
at start (a crash-loop), while `mlops ui --port 99999` was a traceback from the socket.
No server runs here: the settings are checked before anything is served.
"""

from __future__ import annotations

import pytest
import yaml

from mlops.cli import build_parser, main
from mlops.ui.settings import UiSettings

MANIFESTS = ["ui", "manifests", "--gitops", "https://git.example.com/gitops.git",
             "--prometheus", "http://prometheus:9090"]
BELL = "ui\abot"
ONE_LINE = "contains the control character '\\x07' (U+0007): one line of printable text only"


@pytest.mark.parametrize("port", ["0", "99999"])
def test_a_port_out_of_range_is_refused_by_both_with_the_same_message(port, tmp_path, capsys):
    assert main(["ui", "--gitops", str(tmp_path / "g.git"), "--workdir", str(tmp_path / "none"),
                 "--port", port]) == 2
    run_out, run_err = capsys.readouterr()
    assert main([*MANIFESTS, "--port", port]) == 2
    out, err = capsys.readouterr()
    bound = "at least 1" if port == "0" else "at most 65535"
    assert run_err.strip() == err.strip() == f"error: --port {port}: must be {bound}"
    assert out == "" and run_out == ""


def test_the_identity_a_token_signs_as_is_one_line_in_both(tmp_path, capsys):
    """`ui manifests --token-identity` becomes the pod's `mlops ui --by`: the same check,
    named by the flag the person typed."""
    assert main(["ui", "--gitops", str(tmp_path / "g.git"), "--workdir", str(tmp_path / "none"),
                 "--by", BELL]) == 2
    assert capsys.readouterr().err.strip() == f"error: --by {BELL!r}: {ONE_LINE}"
    assert main([*MANIFESTS, "--enable-actions", "--token-secret", "ui-token",
                 "--token-identity", BELL]) == 2
    out, err = capsys.readouterr()
    assert err.strip() == f"error: --token-identity {BELL!r}: {ONE_LINE}" and out == ""


@pytest.mark.parametrize("flags", [
    [],
    ["--enable-actions", "--token-secret", "ui-token", "--token-identity", "release-bot",
     "--port", "9000", "--forge", "gitea"],
    ["--enable-actions", "--proxy-user", "--argo-server", "https://argo:2746",
     "--argo-ca-configmap", "argo-ca"],
    ["--argo-server", "https://argo:2746", "--argo-insecure"],
])
def test_the_deployment_starts_the_ui_the_manifests_checked(flags, capsys):
    """The rendered args, parsed by the real CLI into `mlops ui`'s settings, are accepted
    and give what the manifests were asked for."""
    assert main([*MANIFESTS, *flags]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    args = build_parser().parse_args(pod["containers"][0]["args"])
    started = UiSettings.from_options(
        {k: v for k, v in vars(args).items() if k in UiSettings.model_fields}, environ={})
    assert started.gitops == "https://git.example.com/gitops.git"
    assert started.runtime == "kubernetes"
    assert started.port == (9000 if "--port" in flags else 8765)
    assert started.actions == ("--enable-actions" in flags)
    assert started.by == ("release-bot" if "--token-secret" in flags else None)
    assert started.proxy_user == ("--proxy-user" in flags)
    assert started.loopback == ("--proxy-user" in flags)  # only the proxy beside it
    assert (started.argo_ca is not None, started.argo_insecure) == \
        ("--argo-ca-configmap" in flags, "--argo-insecure" in flags)


def test_environment_fallbacks_and_their_precedence():
    environ = {"MLOPS_UI_TOKEN": "s3cret", "MLOPS_FORGE": "gitea", "MLOPS_MODELS": "/models"}
    settings = UiSettings.from_options({"forge": None}, environ=environ)
    assert (settings.token, settings.forge, settings.models_root) == ("s3cret", "gitea",
                                                                      "/models")
    assert UiSettings.from_options({"forge": "github"}, environ=environ).forge == "github"
    plain = UiSettings.from_options({}, environ={})
    assert (plain.forge, plain.port, plain.host, plain.token) == ("local", 8765, "127.0.0.1",
                                                                  None)
    # What this machine's environment says is not baked into a cluster's UI.
    assert UiSettings.in_cluster({"gitops": "g"}).token is None


def test_who_may_act_beyond_loopback():
    def problem(**options):
        return UiSettings.from_options(options, environ={}).exposure_problem()

    assert problem() is None and problem(host="::1") is None
    assert "exposes the actions" in problem(host="0.0.0.0")
    assert problem(host="0.0.0.0", read_only=True) is None
    assert problem(host="0.0.0.0", token="t") is None
    assert "--proxy-secret" in problem(host="0.0.0.0", proxy_user=True)
    assert problem(host="0.0.0.0", proxy_user=True, proxy_secret="s") is None
