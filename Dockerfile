# syntax=docker/dockerfile:1
# The queueing controller image: `docker build -t REGISTRY/queueing:TAG .`
# Stage 1 builds a virtualenv with the package and its dependencies (wheels need no compiler on the
# slim image; build-essential is there for any sdist); stage 2 copies only the virtualenv.
ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential \
 && rm -rf /var/lib/apt/lists/*
RUN python -m venv /opt/queueing
ENV PATH=/opt/queueing/bin:$PATH
WORKDIR /src
# the build context is the build's inputs only (.dockerignore is an allow-list: pyproject.toml,
# README.md, queueing/, migrations/); the build maps the top-level migrations/ into the package
# (queueing/ledger/_migrations/), so `queueing migrate` in the image needs nothing else
COPY . ./
RUN pip install --upgrade pip \
 && pip install . \
 && cd / && python -c "import queueing.cli, queueing.ledger.migrate as m; assert (m.MIGRATIONS_DIR / 'env.py').is_file() and str(m.MIGRATIONS_DIR).startswith('/opt/queueing/'), m.MIGRATIONS_DIR"

FROM python:${PYTHON_VERSION}-slim-bookworm AS runtime
LABEL org.opencontainers.image.title="queueing" \
      org.opencontainers.image.description="DRA-aware Kueue-style admission controller for GPU clusters" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/queueing/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# a numeric non-root user, so that the pod's runAsNonRoot can verify it
RUN groupadd --system --gid 65532 queueing \
 && useradd --system --uid 65532 --gid 65532 --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin queueing
COPY --from=build /opt/queueing /opt/queueing
USER 65532:65532
WORKDIR /tmp
EXPOSE 8080 8081
ENTRYPOINT ["queueing", "run"]
