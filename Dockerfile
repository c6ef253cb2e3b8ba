# The project's own images, one per job, chosen by the build argument EXTRA
# (the extras of pyproject.toml):
#   --build-arg EXTRA=train          the pipeline's tool image: evaluate, gate,
#                                    publish-model, propose, the exit handler
#                                    (and --build-arg PADDLE=1, see below)
#   --build-arg EXTRA=serve          the model server (`mlops serve`; PADDLE=1 too)
#   --build-arg EXTRA=controller,ui  the promotion controller and the web UI
#                                    (no PaddlePaddle)
#   --target training-base --build-arg EXTRA=kit (and PADDLE=1)
#                                    the training base image: the model-repo kit
#                                    and PaddlePaddle, as root, for a model repo's
#                                    Dockerfile to start FROM (the pipeline passes
#                                    it as the build argument BASE_IMAGE)
# `mlops images build` builds the four (and the examples' training images FROM
# the training base) with podman; docs/cluster.md says where each is used.
FROM python:3.11-slim AS training-base
# git: the gate, propose and the controller read and write git repos.
# libgomp1: paddlepaddle's libcommon.so and libdnnl.so.3 need libgomp.so.1
# (GNU OpenMP), which python:3.11-slim lacks: without it `import paddle` fails
# and every training step and model server crash-loops. It is small, so the
# controller image gets it too and the three images share this layer.
RUN apt-get update \
    && apt-get install -y --no-install-recommends git libgomp1 \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Third-party dependencies first, at the exact versions of requirements.lock,
# so that a change to the source rebuilds only the last two layers: first what
# every image needs (one layer the three images share), then the extra's.
# pyproject.toml names README.md as its readme: a placeholder lets pip read the
# dependencies before the source is copied.
COPY pyproject.toml requirements.lock ./
RUN touch README.md \
    && pip install --no-cache-dir -c requirements.lock . \
    && rm -rf README.md build *.egg-info
# PaddlePaddle (1 GB, the costliest layer) for the train and serve images, in a
# layer of its own before ARG EXTRA, so the two share it: build them with
# --build-arg PADDLE=1. Without it the extra's layer below installs it anyway.
ARG PADDLE=
RUN if [ -n "$PADDLE" ]; then \
        pip install --no-cache-dir -c requirements.lock paddlepaddle; fi
ARG EXTRA=train
RUN touch README.md \
    && pip install --no-cache-dir -c requirements.lock ".[${EXTRA}]" \
    && rm -rf README.md build *.egg-info
COPY README.md ./
COPY contracts contracts
COPY cogs cogs
COPY workflows workflows
COPY promotion promotion
COPY serving serving
COPY gitops gitops
COPY datapins datapins
COPY local local
COPY modelkit modelkit
COPY mlops mlops
RUN pip install --no-cache-dir --no-deps --force-reinstall . && rm -rf /src
WORKDIR /
# `--target training-base` ends here, as root, so a model repo's Dockerfile FROM it can
# still `pip install` its own requirements. The tool images run as user 1000.
FROM training-base
USER 1000
