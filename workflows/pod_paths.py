"""Where the pipeline's pods find things, as the local runner acts them out.

The paths every step container and training worker sees (written as `$(MLOPS_*)`
env names, which the local runner maps to folders on this machine) and the
annotation that names a template's local stand-in (docs/pipeline-internals.md).
"""

# Paths inside the pods. The runner maps these env names to local paths.
MODELS_ENV = "MLOPS_MODELS"  # the models volume's mount, in publish and propose only
WORKSPACE = "/workspace"
PATH_ENV = {
    "MLOPS_REPO": f"{WORKSPACE}/repo",
    "MLOPS_OUT": f"{WORKSPACE}/out",
    "MLOPS_OUTPUTS": "/tmp/outputs",
}
LOCAL_ANNOTATION = "mlops.dev/local"
# The prepared dataset (prepare-data's output, training's --data-dir) and its cache:
# the cache env is mapped to a local directory by the runner, like the paths above.
DATA_DIR = "$(MLOPS_OUT)/data"
DATA_CACHE_ENV = "MLOPS_DATA_CACHE"
DATA_CACHE_MOUNT = "/data-cache"
