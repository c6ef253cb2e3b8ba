#!/usr/bin/env bash
# Set up a fresh machine: Debian's prometheus and haproxy (real services the
# local platform and the tests run), chromium and its driver (the UI's browser
# tests), podman, runc and mmdebstrap (`mlops images build` and the image tier),
# git and kubectl checks, and this project with the Python dependencies pinned
# in requirements.lock.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v prometheus >/dev/null || missing+=(prometheus)
command -v promtool >/dev/null || missing+=(prometheus)
command -v haproxy >/dev/null || missing+=(haproxy)
command -v git >/dev/null || missing+=(git)
# `mlops ui`'s browser tests drive Debian's chromium through its version-matched driver
# (nothing is downloaded at run time: no Playwright or Selenium Manager browser fetch).
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
# The UI's Argo Server stand-in serves TLS with a certificate made by openssl in the test.
command -v openssl >/dev/null || missing+=(openssl)
# `mlops images build` builds every image we ship with podman (runc: crun fails on
# hybrid cgroup hosts) from a base mmdebstrap makes of Debian packages (no registry).
# Installed with their recommended packages, as on the machine where the image tier
# was measured (podman's recommends bring its helpers: conmon's peers, uidmap, ...).
containers=()
command -v podman >/dev/null || containers+=(podman)
command -v runc >/dev/null || [ -x /usr/sbin/runc ] || containers+=(runc)
command -v mmdebstrap >/dev/null || containers+=(mmdebstrap)
if [ ${#missing[@]} -gt 0 ] || [ ${#containers[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    if [ ${#missing[@]} -gt 0 ]; then
        $SUDO apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u) >/dev/null
    fi
    if [ ${#containers[@]} -gt 0 ]; then
        $SUDO apt-get install -y -qq "${containers[@]}" >/dev/null
    fi
fi
# Debian starts the packaged services; we run our own on loopback ports.
for svc in prometheus haproxy prometheus-node-exporter; do
    (command -v systemctl >/dev/null && systemctl stop "$svc" 2>/dev/null) || true
    (command -v service >/dev/null && service "$svc" stop >/dev/null 2>&1) || true
done

# The exact versions CI runs with (requirements.lock, every transitive package),
# then this project on top without letting pip pick anything else.
python3 -m pip install -q --disable-pip-version-check -r requirements.lock
python3 -m pip install -q --disable-pip-version-check --no-deps -e .
# Bytecode for the project's own modules, as pip writes it for what it installs: an editable
# install writes none, and under PYTHONDONTWRITEBYTECODE (CI and container environments) every
# process would compile what it imports again (~0.1 CPU-s a process, hundreds a test run).
# __pycache__ stays out of git (.gitignore) and of the images' build context (.dockerignore).
# Every package of the checkout but tests/ (pytest compiles those itself, rewritten), so a new
# room is compiled without an edit here.
rooms=$(for init in */__init__.py; do dirname "$init"; done | grep -vx tests)
# shellcheck disable=SC2086  # one word a room
python3 -m compileall -q -j 0 $rooms >/dev/null
echo "setup: done ($(prometheus --version 2>&1 | head -1 | cut -d' ' -f1-3); $(haproxy -v | head -1 | cut -d' ' -f1-3); paddle $(python3 -c 'import paddle; print(paddle.__version__)' 2>/dev/null))"
