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
COPY pyproject.toml README.md ./
COPY queueing ./queueing
COPY migrations ./migrations
# queueing.ledger.migrate looks for the Alembic scripts next to the installed package
# (site-packages/migrations); the wheel does not carry them, so they are copied there.
RUN pip install --upgrade pip \
 && pip install . \
 && cp -r migrations "$(python -c 'import pathlib, queueing; print(pathlib.Path(queueing.__file__).resolve().parent.parent)')/migrations" \
 && python -c "import queueing.cli, queueing.ledger.migrate as m; assert m.MIGRATIONS_DIR.is_dir(), m.MIGRATIONS_DIR"

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
