"""The model-name rule, defined once, so that every name derived from it fits.

A model's name becomes part of Kubernetes names and labels in every room:

* the Workflow `<model>-<sha12>`; its PaddleJobs `<workflow>-smoke` and
  `<workflow>-full`, whose worker pods *and* Services paddle-operator names
  `<job>-worker-<i>` (controllers/paddlejob_helper.go, v0.3.5). A Service name
  is an RFC 1035 label: at most 63 characters, starting with a letter;
* the serving Deployment `<model>-<version>`, the Service and the Istio hosts
  `<model>`, label values `app: <model>`, the Sensor `<model>-train`, the
  EventSource `<model>-push`.

The longest is the worker Service, so the rule is: an RFC 1035 label short
enough that `<model>-<sha12>-full-worker-<MAX_WORKERS - 1>` (and the smoke job's
`-smoke-worker-0`, as long) stays within 63.
"""

import re

#: A DNS label's limit (RFC 1035 / Kubernetes IsDNS1035Label).
DNS_LABEL_MAX = 63
#: Most workers a PaddleJob of ours may have (two digits of worker index).
MAX_WORKERS = 99
#: `workflow_name` keeps 12 hex digits of the commit.
SHA_CHARS = 12
_LONGEST_SUFFIX = max(f"-{'0' * SHA_CHARS}-full-worker-{MAX_WORKERS - 1}",
                      f"-{'0' * SHA_CHARS}-smoke-worker-0", key=len)
#: The longest model name whose every derived name is a valid DNS label.
MAX_MODEL_NAME = DNS_LABEL_MAX - len(_LONGEST_SUFFIX)
MODEL_NAME_PATTERN = r"^[a-z]([-a-z0-9]*[a-z0-9])?$"
_MODEL = re.compile(MODEL_NAME_PATTERN)
DESCRIPTION = (f"lower-case letters, digits and '-', starting with a letter and ending with a "
               f"letter or digit, at most {MAX_MODEL_NAME} characters")


#: A model version: a label value in lower case (it is the `version` label, a subset's
#: selector, part of the Deployment's name and a path segment of the models volume).
VERSION_PATTERN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
_VERSION = re.compile(VERSION_PATTERN)
MAX_VERSION = 63


def version_problem(version: object) -> str | None:
    """Why `version` cannot be a model version, or None when it can. Never a path:
    no '/', and no '..' (a version is joined to directories and queries)."""
    if not isinstance(version, str) or len(version) > MAX_VERSION \
            or not _VERSION.match(version) or ".." in version:
        return (f"model version {version!r} is not valid (lower-case letters, digits, '-' and "
                f"'.', no '..', at most {MAX_VERSION} characters)")
    return None


def model_name_problem(name: object) -> str | None:
    """Why `name` cannot be a model name, or None when it can."""
    if not isinstance(name, str) or not _MODEL.match(name):
        return f"model name {name!r} is not valid ({DESCRIPTION})"
    if len(name) > MAX_MODEL_NAME:
        return (f"model name {name!r} has {len(name)} characters; at most {MAX_MODEL_NAME} so "
                f"that its PaddleJob worker Services ('{name}{_LONGEST_SUFFIX}') stay within "
                f"{DNS_LABEL_MAX}")
    return None


def valid_model_name(name: str) -> str:
    """`name`, or ValueError with the reason (a pydantic field validator)."""
    problem = model_name_problem(name)
    if problem:
        raise ValueError(problem)
    return name


def is_model_name(name: object) -> bool:
    """True when `name` follows the rule."""
    return model_name_problem(name) is None


def derived_names(model: str, sha: str = "0" * 40, workers: int = MAX_WORKERS) -> list[str]:
    """Every Kubernetes name the project derives from `model` (for tests and lint)."""
    workflow = f"{model}-{sha[:SHA_CHARS]}"
    names = [workflow, f"{model}-train", f"{model}-push", model]
    for job, count in (("smoke", 1), ("full", workers)):
        names += [f"{workflow}-{job}-worker-{i}" for i in range(count)]
    return names
