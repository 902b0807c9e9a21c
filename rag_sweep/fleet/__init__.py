"""Steps on a worker fleet: Dagster's Celery executor sends each step of a sweep to a Celery worker (any
machine that reaches the broker, the deployment's PostgreSQL, its object storage and its MLflow server),
routed by queue. `celery_app` is what a worker runs; `step_jobs` is the job each step runs as, which a
worker rebuilds from the plan the runner published to the data dir."""
