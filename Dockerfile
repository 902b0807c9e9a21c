# Image of the code location (also used by the webserver and daemon services in docker-compose.yml).
FROM python:3.11-slim
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 LITELLM_LOCAL_MODEL_COST_MAP=True HF_HUB_OFFLINE=1 \
    DAGSTER_DISABLE_TELEMETRY=1 MLFLOW_DISABLE_TELEMETRY=true DAGSTER_HOME=/opt/dagster/home
RUN pip install --no-cache-dir uv
WORKDIR /opt/rag
COPY pyproject.toml uv.lock README.md ./
# every package of pyproject.toml's wheel
COPY rag_core rag_core
COPY rag_assets rag_assets
COPY resources resources
COPY sensors sensors
COPY rag_sweep rag_sweep
COPY examples examples
COPY workspace.yaml ./
# the extras the deployment runs (pyproject.toml): all of them by default, the fleet's Celery workers too;
# `--build-arg EXTRAS=` builds the lean default install
ARG EXTRAS="--extra all"
RUN uv sync --frozen --no-dev $EXTRAS && mkdir -p $DAGSTER_HOME
COPY deploy/dagster.yaml $DAGSTER_HOME/dagster.yaml
ENV PATH=/opt/rag/.venv/bin:$PATH
EXPOSE 4000
CMD ["dagster", "code-server", "start", "-h", "0.0.0.0", "-p", "4000", "-m", "rag_sweep.definitions"]
