"""cogs.containers: the one container spec -> local process translator.

The rules are the kubelet's: `$(VAR)` in env values expands from the entries
before it and in command/args from the whole env, an unknown reference stays
as written (kubernetes/kubernetes `third_party/forked/golang/expansion/expand.go`,
`pkg/kubelet/kuberuntime/kuberuntime_container.go`); volume mounts decide
which container paths are which local directories.
"""

import sys

import pytest

from cogs.containers import (
    ContainerSpecError,
    Mounts,
    container_env,
    expand_refs,
    local_argv,
    local_process,
)

CONTAINER = {
    "name": "server",
    "command": ["mlops"],
    "args": ["serve", "$(MODEL_DIR)", "--log", "/scratch/log", "$(UNKNOWN)"],
    "workingDir": "/workspace/repo",
    "env": [
        {"name": "ROOT", "value": "/models"},
        {"name": "MODEL_DIR", "value": "$(ROOT)/shapes/v1"},
        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "git", "key": "token"}}},
        {"name": "LATER", "value": "$(AFTER)"},
        {"name": "AFTER", "value": "x"},
    ],
}
MOUNTS = Mounts({"/models": "/srv/models", "/models/shapes": "/data/shapes",
                 "/scratch": "/tmp/s", "/workspace/repo": "/home/me/repo"})


def test_env_values_expand_from_earlier_entries_and_mounted_paths_are_mapped():
    env = container_env(CONTAINER, source="dep.yaml", mounts=MOUNTS)
    # the longest mount wins: /models/shapes is its own volume
    assert env["MODEL_DIR"] == "/data/shapes/v1"
    assert env["ROOT"] == "/srv/models"
    assert env["LATER"] == "$(AFTER)"  # defined after it: kept as written, as the kubelet does
    assert "TOKEN" not in env  # no secrets given: the local environment's own value


def test_a_value_from_a_secret_must_be_given_when_secrets_are():
    assert container_env(CONTAINER, source="s", secrets={"TOKEN": "t"})["TOKEN"] == "t"
    with pytest.raises(ContainerSpecError, match=r"dep.yaml: env TOKEN comes from .*secrets"):
        container_env(CONTAINER, source="dep.yaml", secrets={})


def test_the_process_expands_and_maps_its_args_and_working_directory():
    process = local_process(CONTAINER, source="dep.yaml", mounts=MOUNTS)
    assert process.argv == ["mlops", "serve", "/data/shapes/v1", "--log", "/tmp/s/log",
                            "$(UNKNOWN)"]
    assert process.cwd == "/home/me/repo"
    assert local_argv(process.argv, "/py")[:3] == ["/py", "-m", "mlops"]
    assert local_argv(["python3", "-c", "1"]) == [sys.executable, "-c", "1"]
    assert local_argv(["./run.sh"]) == ["./run.sh"]


def test_an_unmounted_working_directory_and_a_missing_command_are_named():
    outside = {**CONTAINER, "workingDir": "/elsewhere"}
    with pytest.raises(ContainerSpecError,
                       match=r"job: workingDir: /elsewhere is outside the mapped directories"):
        local_process(outside, source="job", mounts=MOUNTS)
    with pytest.raises(ContainerSpecError, match="job: the container has no command or args"):
        local_process({"name": "c"}, source="job")
    # without mounts a container engine runs it: the path stays the container's
    assert local_process(outside, source="job").cwd == "/elsewhere"


def test_expand_refs_leaves_unknown_references_and_plain_dollars_alone():
    assert expand_refs("$(A)/$(B) $HOME $(", {"A": "a"}) == "a/$(B) $HOME $("
