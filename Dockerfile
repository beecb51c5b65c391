# streamflow: one image for every topology (`streamflow run <role>`) and for `streamflow topics`.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY streamflow ./streamflow
COPY schemas ./schemas
COPY topologies ./topologies
RUN pip install --no-cache-dir . && useradd --create-home streamflow \
    && mkdir -p /var/lib/streamflow && chown streamflow /var/lib/streamflow
USER streamflow
ENV STREAMFLOW_STATE_DIR=/var/lib/streamflow
ENTRYPOINT ["streamflow"]
