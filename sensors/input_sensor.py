"""React to a changed corpus, QA set or sweep file, by content hash."""

import json

import dagster as dg

from rag_core.fingerprint import file_hash
from rag_core.spec import Sweep


def build_input_sensor(sweep: Sweep, inputs_job) -> dg.SensorDefinition:
    loaded_sweep_hash = file_hash(sweep.path)

    @dg.sensor(
        name="input_change_sensor",
        job=inputs_job,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Hashes the corpus and QA files; on a change it re-snapshots them (inputs_job) and the "
        "automation sensor re-materializes everything downstream. A changed sweep file needs a code "
        "location reload (its partitions are read at load time): the sensor says so.",
    )
    def input_change_sensor(context: dg.SensorEvaluationContext):
        hashes = {"corpus": file_hash(sweep.corpus_path), "qa": file_hash(sweep.qa_path)}
        previous = json.loads(context.cursor) if context.cursor else {}
        context.update_cursor(json.dumps(hashes))
        if file_hash(sweep.path) != loaded_sweep_hash:
            context.log.warning(f"{sweep.path} changed since load: reload the code location to pick it up")
        if previous == hashes:
            return dg.SkipReason("corpus and QA set unchanged")
        changed = sorted(k for k in hashes if previous.get(k) != hashes[k])
        return dg.RunRequest(
            run_key=f"corpus-{hashes['corpus'][:16]}-qa-{hashes['qa'][:16]}",
            tags={"rag/changed": ",".join(changed)},
        )

    return input_change_sensor
