"""The controller's options have one owner (`promotion/controller_settings.py`): what
`controller run` refuses, `controller manifests` refuses with the same message, and the
Deployment the manifests render starts a process with exactly the settings they checked.

Before, `controller manifests --preset bogus` exited 0 and rendered `--preset bogus` into
the Deployment (a crash-loop in the cluster) while `controller run` refused it: the check
lived only in `run`'s glue. No server runs here: the settings are pure values.
"""

from __future__ import annotations

import pytest
import yaml

from mlops.cli import build_parser, main
from mlops.commands.controller import settings_of
from promotion.controller_settings import ControllerSettings
from promotion.decision.policy import load_policy
from promotion.errors import SettingsError

RUN = ["controller", "run", "--gitops", "/nowhere/gitops", "--prometheus", "http://127.0.0.1:1",
       "--once"]
MANIFESTS = ["controller", "manifests", "--gitops", "https://git.example.com/gitops.git",
             "--prometheus", "http://prometheus:9090", "--application", "shapes"]

#: Each option both commands take, with a value `controller run` refuses, and what it says.
REFUSED = {
    "preset": (["--preset", "bogus"],
               "error: --preset 'bogus': unknown metrics preset; choose one of haproxy, istio, "
               "model (a model's own queries, preset 'custom', go in its canary-policy.yaml)"),
    "workers": (["--workers", "0"], "error: --workers 0: must be at least 1"),
    "git-poll": (["--git-poll", "-1"], "error: --git-poll -1: must be at least 0"),
}


@pytest.mark.parametrize("option", sorted(REFUSED))
def test_manifests_refuse_what_run_refuses_with_the_same_message(option, capsys, tmp_path):
    flags, message = REFUSED[option]
    assert main([*RUN, "--workdir", str(tmp_path / "work"), *flags]) == 2
    run_out, run_err = capsys.readouterr()
    assert main([*MANIFESTS, *flags]) == 2
    out, err = capsys.readouterr()
    assert run_err.strip() == err.strip() == message
    assert out == "" and run_out == ""  # nothing rendered, nothing run
    assert not (tmp_path / "work").exists()  # refused before the controller was built


def test_the_deployment_starts_the_process_the_manifests_checked(capsys):
    """The rendered args, parsed by the real CLI into `controller run`'s settings, give the
    settings `controller manifests` validated (cluster defaults included)."""
    assert main([*MANIFESTS, "--preset", "haproxy", "--git-poll", "30", "--workers", "3",
                 "--forge", "gitea", "--models-namespace", "serving"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    started = settings_of(build_parser().parse_args(args))
    assert started == ControllerSettings.in_cluster({
        "gitops": "https://git.example.com/gitops.git", "prometheus": "http://prometheus:9090",
        "preset": "haproxy", "git_poll": 30.0, "workers": 3, "forge": "gitea",
        "readiness_namespace": "serving", "argocd_namespace": "argocd"})
    assert (started.runtime, started.workdir, started.metrics_port) == ("kubernetes", "/work",
                                                                        9100)
    defaults = ControllerSettings.in_cluster({"gitops": "g", "prometheus": "p"})
    assert (defaults.git_poll, defaults.workers) == (15.0, 8)  # a forge, a fleet


def test_the_preset_is_the_flag_then_the_policy_then_the_runtimes():
    """CLI > the model's canary-policy.yaml > the runtime's router view (`model` without one)."""
    names_none = load_policy({})
    names_istio = load_policy({"metrics": {"preset": "istio"}})
    base = {"gitops": "g", "prometheus": "p"}
    none = ControllerSettings.from_options(base, environ={})
    local = ControllerSettings.from_options({**base, "platform_workdir": "/w"}, environ={})
    cluster = ControllerSettings.from_options({**base, "readiness": "kubernetes"}, environ={})
    flag = ControllerSettings.from_options({**base, "preset": "model",
                                            "readiness": "kubernetes"}, environ={})
    assert [s.preset_for(names_none) for s in (none, local, cluster, flag)] == \
        ["model", "haproxy", "istio", "model"]
    assert [s.preset_for(names_istio) for s in (none, local, flag)] == ["istio", "istio", "model"]


def test_environment_fallbacks_apply_to_run_and_never_to_the_cluster():
    environ = {"MLOPS_GITOPS_REPO": "/srv/gitops", "MLOPS_WEBHOOK_URL": "https://hooks/x",
               "MLOPS_WORKDIR": "/srv/platform"}
    run = ControllerSettings.from_options({"prometheus": "p"}, environ=environ)
    assert (run.gitops, run.webhook, run.platform_workdir, run.runtime) == \
        ("/srv/gitops", "https://hooks/x", "/srv/platform", "local")
    given = ControllerSettings.from_options({"prometheus": "p", "gitops": "/mine",
                                             "webhook": "https://hooks/y"}, environ=environ)
    assert (given.gitops, given.webhook) == ("/mine", "https://hooks/y")  # a flag wins
    with pytest.raises(SettingsError, match=r"--gitops: .*\$MLOPS_GITOPS_REPO"):
        ControllerSettings.from_options({"prometheus": "p"}, environ={})
    # What this machine's environment says is not baked into a cluster's controller.
    cluster = ControllerSettings.in_cluster({"gitops": "g", "prometheus": "p"})
    assert (cluster.webhook, cluster.platform_workdir) == (None, None)


def test_every_bad_option_is_named_in_one_line():
    with pytest.raises(SettingsError) as refused:
        ControllerSettings.from_options({"gitops": "g", "prometheus": "p", "interval": 0,
                                         "metrics_port": 70000, "readiness": "cloud"},
                                        environ={})
    assert str(refused.value) == (
        "--interval 0: must be more than 0; --metrics-port 70000: must be at most 65535; "
        "--readiness 'cloud': input should be 'kubernetes', 'local' or 'none'")
    assert refused.value.exit_code == 2
