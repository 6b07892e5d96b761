# syntax=docker/dockerfile:1
#
# Translation service image: serving dependencies only (onnxruntime, no torch), two targets.
#
#   docker build -t mtserve:cpu .                 # default target: cpu (the last stage of this file)
#   docker build -t mtserve:cpu --target cpu .
#   docker build -t mtserve:gpu --target gpu .
#
# cpu: python:3.11-slim + onnxruntime (CPU wheel).
# gpu: NVIDIA CUDA 13 + cuDNN 9 runtime image + onnxruntime-gpu as requirements-gpu.txt pins it, the one pin
#   scripts/gpu_check.sh checks and installs too (docs/benchmarks.md, "GPU check").
#   Checked against PyPI metadata: onnxruntime-gpu 1.27.0 and later are built for CUDA 13 (1.31.1's CUDA
#   provider links libcudart.so.13 / libcublas.so.13) and need an NVIDIA driver >= 580; 1.26.0 was the last
#   built for CUDA 12. CUDA_IMAGE's major must be the pin's (tests/deploy checks it). The tag below has not
#   been pulled here (no Docker engine on these machines): pick a current 13.x "cudnn-runtime" tag if it is gone.
#   The Ubuntu 24.04 base brings Python 3.12 (pyproject.toml requires >= 3.11).
#
# Settings come from MT_* environment variables at run time (see docs/deployment.md).
# The same entry script runs in compose and Kubernetes: deploy/entrypoint.sh (exec python -m service).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG CUDA_IMAGE=nvidia/cuda:13.0.2-cudnn-runtime-ubuntu24.04

# ---------------------------------------------------------------------------------------------------
# requirements: the GPU image's serving list, generated from pyproject.toml (the CPU image installs the lock file)
FROM ${PYTHON_IMAGE} AS requirements
WORKDIR /src
COPY pyproject.toml deploy/docker/requirements.py ./
RUN python requirements.py pyproject.toml --without-onnxruntime > requirements-serving-gpu.txt

# ---------------------------------------------------------------------------------------------------
# app: only the files the service needs at run time, owned by root (read-only to the service user)
FROM scratch AS app
COPY pyproject.toml README.md /app/
COPY core/ /app/core/
COPY engine/ /app/engine/
COPY service/ /app/service/
COPY model_repository/ /app/model_repository/
COPY --chmod=0755 deploy/entrypoint.sh /app/deploy/entrypoint.sh

# ---------------------------------------------------------------------------------------------------
# cpu-builder: a virtual environment with exactly the locked CPU serving dependencies (versions and hashes:
# deploy/docker/requirements.lock, refreshed with `make lock`), and neither pip nor setuptools in it: the base
# image's pip installs into the venv from outside (--python)
FROM ${PYTHON_IMAGE} AS cpu-builder
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
COPY deploy/docker/requirements.lock /tmp/requirements.lock
RUN python -m venv --without-pip /opt/venv \
    && python -m pip --python /opt/venv/bin/python install --no-cache-dir --require-hashes --no-deps \
        -r /tmp/requirements.lock

# ---------------------------------------------------------------------------------------------------
# native: the fused decoder step's onnxruntime operator (MT_FUSED_STEP, off by default; native/build.sh), compiled for
# NATIVE_MARCH (x86-64-v2: its AVX-512 VNNI and AMX kernels are compiled for those instruction sets either way and
# chosen at run time; another architecture passes its own, e.g. --build-arg NATIVE_MARCH=armv8-a). The cpu image
# carries the library, not the compiler.
FROM ${PYTHON_IMAGE} AS native
ARG NATIVE_MARCH=x86-64-v2
# The base image's compiler (the base tag fixes the Debian release); not version-pinned so that fixes apply on rebuild.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
COPY native/ /src/native/
RUN NATIVE_MARCH=${NATIVE_MARCH} bash /src/native/build.sh /out/libmtserve_fused_step.so

# ---------------------------------------------------------------------------------------------------
# gpu-builder: the same on the CUDA base, with requirements-gpu.txt's onnxruntime-gpu instead of onnxruntime;
# the venv's own pip installs, then uninstalls itself (the runtime venv has neither pip nor setuptools here too)
FROM ${CUDA_IMAGE} AS gpu-builder
ENV DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
# The distribution's own python3 (the CUDA base tag fixes the distribution release); not version-pinned
# so that security updates apply on rebuild.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
COPY --from=requirements /src/requirements-serving-gpu.txt /tmp/requirements.txt
COPY requirements-gpu.txt /tmp/requirements-gpu.txt
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir -r /tmp/requirements.txt -r /tmp/requirements-gpu.txt \
    && /opt/venv/bin/python -m pip uninstall --yes pip setuptools

# ---------------------------------------------------------------------------------------------------
# gpu: runtime image for NVIDIA GPUs (run with --gpus all, or the compose/Kubernetes GPU settings).
# HOME=/tmp in both runtime images: the service user has no home, and libraries that look for one at start,
# onnxruntime among them, would print a non-JSON line otherwise (every line of the container's log is JSON).
FROM ${CUDA_IMAGE} AS gpu
ENV DEBIAN_FRONTEND=noninteractive
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 mt \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin mt \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/mtserve
COPY --from=gpu-builder /opt/venv /opt/venv
COPY --from=app /app /app
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MT_HOST=0.0.0.0 \
    MT_PORT=8000 \
    MT_MODEL_REPOSITORY=/app/model_repository \
    MT_STATE_DIR=/var/lib/mtserve \
    MT_PROVIDERS=cuda \
    HOME=/tmp
WORKDIR /app
VOLUME ["/var/lib/mtserve"]
USER 10001:10001
EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=4s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('MT_PORT', '8000'), timeout=3)"]
ENTRYPOINT ["/app/deploy/entrypoint.sh"]

# ---------------------------------------------------------------------------------------------------
# cpu: runtime image for CPUs; the last stage, so the default target of a plain `docker build .`
FROM ${PYTHON_IMAGE} AS cpu
RUN groupadd --system --gid 10001 mt \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin mt \
    && install -d -o 10001 -g 10001 -m 0750 /var/lib/mtserve
COPY --from=cpu-builder /opt/venv /opt/venv
COPY --from=app /app /app
COPY --from=native /out/libmtserve_fused_step.so /app/build/native/libmtserve_fused_step.so
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONPATH=/app \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MT_HOST=0.0.0.0 \
    MT_PORT=8000 \
    MT_MODEL_REPOSITORY=/app/model_repository \
    MT_STATE_DIR=/var/lib/mtserve \
    MT_PROVIDERS=cpu \
    HOME=/tmp
WORKDIR /app
VOLUME ["/var/lib/mtserve"]
USER 10001:10001
EXPOSE 8000
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=4s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/readyz' % os.environ.get('MT_PORT', '8000'), timeout=3)"]
ENTRYPOINT ["/app/deploy/entrypoint.sh"]
