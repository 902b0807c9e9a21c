"""The fleet's Celery app, what every worker runs:

    celery -A rag_sweep.fleet.celery_app worker -Q dagster[,gpu] -c 1 -n NAME@%h

Its tasks are dagster-celery's (execute one step of a Dagster run); the broker is $CELERY_BROKER_URL and
results travel back on it (`rpc://`), so a worker needs no store of its own.
"""

from dagster_celery.make_app import make_app
from dagster_celery.tasks import create_task

from resources.environment import celery_broker_url

# A step's task is acknowledged when the step has ended and handed back to the broker when its worker dies
# (killed, out of memory, its machine gone), so another worker runs it: without these a lost worker's step
# is never run again and the run waits for it forever. One task at a time per worker process: a step can
# take minutes (embedding a corpus), and a prefetched task would wait behind it while another worker idles.
CELERY_SETTINGS = {
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "worker_prefetch_multiplier": 1,
}

app = make_app({"broker": celery_broker_url(), "backend": "rpc://"})
app.conf.update(CELERY_SETTINGS)
execute_plan = create_task(app)
