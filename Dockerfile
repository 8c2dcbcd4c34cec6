# syntax=docker/dockerfile:1
# One image for every clawlet role (README "Running clawlet for a team"):
#   docker run … clawlet                         clawlet serve --host 0.0.0.0 (needs CLAWLET_API_TOKEN)
#   docker run … clawlet control-plane serve …   a control-plane instance
#   docker run … clawlet exec-plane              one user's execution plane
# Stages: web (Node 20 builds the workbench), python (the locked dependencies and clawlet in a
# venv), runtime (slim, bubblewrap for the tool sandbox, a non-root user).

ARG NODE_IMAGE=node:20-bookworm-slim
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

# --- the web workbench: web/ → src/clawlet/web (vite's outDir), as scripts/setup builds it -------
FROM ${NODE_IMAGE} AS web
WORKDIR /build/web
COPY web/package.json web/package-lock.json ./
RUN npm ci --no-audit --no-fund --loglevel=error
COPY web/ ./
RUN npm run build

# --- the locked dependencies, then clawlet itself, in /opt/clawlet ------------------------------
FROM ${PYTHON_IMAGE} AS python
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/clawlet
WORKDIR /build
COPY pyproject.toml requirements.lock ./
# requirements.lock also pins the test tools: install only clawlet's own dependencies (and the
# PostgreSQL driver of the "postgres" extra), each at its locked version
RUN python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p["dependencies"] + p["optional-dependencies"]["postgres"]))' > runtime-requirements.txt \
 && /opt/clawlet/bin/pip install -c requirements.lock -r runtime-requirements.txt
COPY README.md ./
COPY src/ src/
COPY --from=web /build/src/clawlet/web/ src/clawlet/web/
RUN /opt/clawlet/bin/pip install --no-deps . \
 && /opt/clawlet/bin/python -c 'import clawlet.api.static as s; assert (s.WEB_DIR / "index.html").is_file(), "the workbench is missing from the package"'

# --- what runs ----------------------------------------------------------------------------------
FROM ${PYTHON_IMAGE} AS runtime
# bubblewrap: the sandbox of terminal, python_repl and MCP servers (README "The tool sandbox"); in a
# container it needs seccomp, AppArmor and /proc masks relaxed (deploy/compose.yaml, deploy/k8s).
# tini: PID 1, which forwards signals and reaps the orphans of session and tool processes.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap tini \
 && rm -rf /var/lib/apt/lists/*
RUN groupadd --system --gid 10001 clawlet \
 && useradd --system --uid 10001 --gid clawlet --home-dir /var/lib/clawlet --create-home \
    --shell /usr/sbin/nologin clawlet
COPY --from=python /opt/clawlet /opt/clawlet
COPY --chmod=0755 deploy/healthcheck.py /usr/local/bin/clawlet-healthcheck
ENV PATH=/opt/clawlet/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    CLAWLET_HOME=/var/lib/clawlet
WORKDIR /var/lib/clawlet
# numeric, so that Kubernetes' runAsNonRoot can check it
USER 10001:10001
EXPOSE 8002 8100
# clawlet serve's liveness endpoint; a control plane's service overrides the URL (compose, k8s)
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 \
  CMD ["clawlet-healthcheck", "http://127.0.0.1:8002/health/live"]
ENTRYPOINT ["/usr/bin/tini", "--", "clawlet"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8002"]
