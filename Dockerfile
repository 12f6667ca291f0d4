# nmt-serve: the English->German translation service with its bundled checkpoint.
#
#   GPU (default; torch comes with the base image):
#     docker build -t nmt-serve:gpu .
#   CPU (torch's CPU wheel, installed by scripts/install.sh; a base with g++ and Python's headers for the graphs):
#     docker build -t nmt-serve:cpu --build-arg BASE_IMAGE=python:3.11-bookworm \
#                  --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu .
#   podman: add --format docker (podman's own image format drops the HEALTHCHECK).
#   Behind a proxy with its own CA: --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt, the bundle pip trusts.
#   A PyPI mirror, a directory of wheels: --build-arg PIP_INDEX_URL=..., PIP_FIND_LINKS=... (docs/deployment.md, Build).
#   scripts/image-check.sh builds the CPU image from Debian with no image registry, runs it and checks it.
# No `# syntax=` line: BuildKit would fetch that frontend from Docker Hub; its own (Docker >= 23) reads this file.
#
# Configuration is only through NMT_* environment variables (see app/settings.py), e.g.
#   docker run --gpus all -p 8000:8000 -e NMT_DTYPE=float16 nmt-serve:gpu
# The install steps are scripts/install.sh, the same script the README's quick start runs.

# Any image with Python >= 3.11 (its venv module too: Debian's python3-venv) and bash; for the CPU image's compiled
# graphs also a C++ compiler (g++) and Python's headers (Debian's python3-dev: the graphs then run without the GIL).
# pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime ships Python 3.11 and a CUDA 12.4 build of torch 2.5.1 (kept by
# install.sh, since torch is already importable).
ARG BASE_IMAGE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

# ---- deps: torch and the locked runtime set; rebuilt only when that lock or the install script change ----
FROM ${BASE_IMAGE} AS deps
# Empty: torch (if the base image has none) comes from PyPI. The CPU image passes the CPU wheel index.
ARG TORCH_INDEX_URL=""
# pip's own settings, for this stage only: a PyPI mirror, more indexes, a directory (or http:// page) of wheels such
# as torch's CPU build, hosts without TLS. Build arguments stay in the image's history: no passwords in them.
ARG PIP_INDEX_URL=https://pypi.org/simple
ARG PIP_EXTRA_INDEX_URL=""
ARG PIP_FIND_LINKS=""
ARG PIP_TRUSTED_HOST=""
# The image's environment is a virtual environment over the base image's Python: Debian's and Ubuntu's refuse pip
# (PEP 668), and --system-site-packages keeps a torch the base image carries.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH
WORKDIR /app
COPY requirements/runtime.txt requirements/torch.in requirements/torch.txt requirements/
COPY scripts/install.sh scripts/env.sh scripts/
# The secret pip-ca, when given, is the CA bundle pip trusts (a proxy's own CA); it never reaches a layer.
RUN --mount=type=secret,id=pip-ca \
    if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
    && python3 -m venv --system-site-packages "$VIRTUAL_ENV" \
    && bash scripts/install.sh runtime --deps-only \
    && python -c "import sys, torch; assert sys.version_info >= (3, 11), sys.version; print('torch', torch.__version__, 'cuda', torch.version.cuda)"

# ---- runtime: the code and the checkpoint on top of the cached dependencies, run as a non-root user ----
FROM deps AS runtime
RUN groupadd --system --gid 10001 nmt \
    && useradd --system --uid 10001 --gid nmt --create-home --home-dir /home/nmt --shell /usr/sbin/nologin nmt
COPY pyproject.toml README.md ./
COPY model/ model/
COPY app/ app/
COPY checkpoints/multi30k-en-de/ checkpoints/multi30k-en-de/
COPY checkpoints/multi30k-en-fr/ checkpoints/multi30k-en-fr/
# The project itself, editable (as in the README) and without dependencies (the deps stage has them).
RUN bash scripts/install.sh runtime --project-only \
    && command -v nmt-serve
# Code and weights stay root-owned and read-only for the service user; compiled graphs, stored glossaries and file
# translations go to directories of its own (volumes in docker-compose.yml), which a restart reuses.
RUN mkdir -p /var/cache/nmt-serve /var/lib/nmt-serve/glossaries /var/lib/nmt-serve/jobs \
    && chown 10001:10001 /var/cache/nmt-serve /var/lib/nmt-serve/glossaries /var/lib/nmt-serve/jobs
ENV NMT_HOST=0.0.0.0 \
    NMT_PORT=8000 \
    NMT_MODEL_DIR=/app/checkpoints/multi30k-en-de \
    NMT_COMPILE_CACHE_DIR=/var/cache/nmt-serve \
    NMT_GLOSSARY_DIR=/var/lib/nmt-serve/glossaries \
    NMT_JOB_DIR=/var/lib/nmt-serve/jobs
USER 10001:10001
# Optional: the compiled graphs in the image (docker build --build-arg PRECOMPILE=1; minutes). They serve where the
# CPU (or GPU), torch and the NMT_* settings that shape them match the build's; elsewhere a server ignores them with
# a warning and compiles its own. A named volume on /var/cache/nmt-serve starts as a copy of them.
ARG PRECOMPILE=0
RUN if [ "$PRECOMPILE" = 1 ]; then nmt-serve --precompile; fi
EXPOSE 8000
# /ready answers 200 once the model is loaded and warmed up, 503 before (and if loading failed).
# Python's urllib rather than curl: a minimal Debian base has no curl. It follows NMT_PORT when that is overridden.
HEALTHCHECK --interval=15s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/ready' % os.environ.get('NMT_PORT', '8000'), timeout=4)"]
ENTRYPOINT ["nmt-serve"]
