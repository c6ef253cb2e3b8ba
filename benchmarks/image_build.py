"""What the local build-image step costs a push (`mlops run`, the demo), with podman.

    python benchmarks/image_build.py [--out benchmarks/results/image_build.json] [--repeat 3]

On a copy of examples/shapes-detector, as the rendered step runs it
(`mlops.images.stepbuild.build_for_step` with the step's script and env):

* `first`: the image built from these inputs for the first time on the current training
  base (the base found current or built first, as a push finds it; its own seconds are
  reported apart when it had to be built);
* `unchanged_inputs`: a push that changes only `mlops.yaml` (the `.dockerignore` leaves it
  out): the digest is the same, no `podman build` runs;
* `layer_cached_build`: `podman build` of the same Dockerfile and context with every layer
  in the cache (what each push would cost without the digest);
* `source_changed`: a push that changes `train.py`: the layers after its `COPY` rebuilt.

Each is the median of `--repeat` runs (`first` runs once). The store is the user's
(`$MLOPS_CONTAINERS_DIR`); the load average is recorded beside the numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import platform
import shutil
import statistics
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mlops.images.build import HOST_CA, podman_build_argv, prepare_store  # noqa: E402
from mlops.images.podman import Store  # noqa: E402
from mlops.images.stepbuild import build_args_of, build_for_step  # noqa: E402
from workflows.config import load_config  # noqa: E402
from workflows.pipeline import build_workflow_template  # noqa: E402
from workflows.settings import PipelineSettings  # noqa: E402


def _step(repo: pathlib.Path) -> tuple[dict[str, str], str]:
    doc = build_workflow_template(load_config(repo), PipelineSettings()).to_dict()
    step = next(t for t in doc["spec"]["templates"] if t["name"] == "build-image")
    env = {e["name"]: e["value"].replace("{{workflow.parameters.revision}}", "0" * 40)
           for e in step["container"]["env"] if "value" in e}
    env["MLOPS_REPO"] = str(repo)
    return env, step["container"]["args"][0]


def _timed(fn) -> float:
    start = time.monotonic()
    fn()
    return round(time.monotonic() - start, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "image_build.json"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    store = Store()
    log_lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="image-build-bench-") as tmp:
        repo = pathlib.Path(tmp) / "shapes-detector"
        shutil.copytree(ROOT / "examples" / "shapes-detector", repo,
                        ignore=shutil.ignore_patterns("data", "__pycache__"))
        # a marker that makes these inputs new to the store: `first` is a real build
        (repo / "train.py").write_text((repo / "train.py").read_text()
                                       + f"\n# benchmark {time.time_ns()}\n")
        env, script = _step(repo)
        load_before = os.getloadavg()[0]
        start = time.monotonic()
        first = build_for_step(env, script, store=store, log=log_lines.append)
        first_s = round(time.monotonic() - start, 2)
        base_built = any("making the training base" in line for line in log_lines)

        def unchanged() -> None:
            (repo / "mlops.yaml").write_text((repo / "mlops.yaml").read_text() + "# push\n")
            again = build_for_step(env, script, store=store, log=log_lines.append)
            assert not again.built and again.image == first.image

        unchanged_s = [_timed(unchanged) for _ in range(args.repeat)]
        ca, conf = prepare_store(store, HOST_CA, log_lines.append)
        build_args, _ = build_args_of(script, env)
        argv = podman_build_argv(repo, repo / "Dockerfile", build_args, [first.image], ca=ca,
                                 pip_conf_path=conf, digest=first.digest)
        cached_s = [_timed(lambda: store.podman(*argv)) for _ in range(args.repeat)]

        def source_changed() -> None:
            (repo / "train.py").write_text((repo / "train.py").read_text() + "# edit\n")
            assert build_for_step(env, script, store=store, log=log_lines.append).built

        changed_s = [_timed(source_changed) for _ in range(args.repeat)]
    result = {
        "example": "shapes-detector",
        "first_s": first_s,
        "first_built_the_training_base": base_built,
        "unchanged_inputs_s": statistics.median(unchanged_s),
        "layer_cached_build_s": statistics.median(cached_s),
        "source_changed_s": statistics.median(changed_s),
        "repeat": args.repeat,
        "load_before": round(load_before, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared)",
    }
    pathlib.Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
