# Fairshare web, worker and beat image.
FROM python:3.11-slim AS base
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    FAIRSHARE_VAR_DIR=/var/lib/fairshare STATIC_ROOT=/app/staticfiles
WORKDIR /app
RUN useradd --system --uid 10001 --home /app fairshare \
    && mkdir -p /var/lib/fairshare && chown fairshare /var/lib/fairshare
COPY pyproject.toml README.md ./
COPY config ./config
COPY kube ./kube
COPY quotas ./quotas
COPY scheduling ./scheduling
COPY monitoring ./monitoring
RUN pip install --no-cache-dir .
COPY . .
RUN SECRET_KEY=build-only python manage.py collectstatic --noinput -v0
USER fairshare
EXPOSE 8000
CMD ["gunicorn", "config.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
