"""Drift alerts: a sensor per sweep that sends every failed `nightly_drift` check of its leaderboard
(rag_core/decision/drift.py: the recommended config dropped, the top tier changed, the judge drifted from
people's labels, the recommendation was lost)
to the webhook $RAG_ALERT_WEBHOOK as JSON, once each (its cursor is the last check evaluation sent)."""

from __future__ import annotations

import json
import urllib.request

import dagster as dg

from rag_core.common.redaction import redact_url, url_secrets
from resources.environment import alert_settings


def post_json(url: str, body: dict, timeout_s: float = 10.0) -> int:
    try:
        request = urllib.request.Request(
            url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            return response.status
    except Exception as e:  # a failed tick's error is stored and shown: never with the webhook's token
        from resources.environment import redact

        message = f"{type(e).__name__}: {e}"
        if (redacted := redact(message.replace(url, redact_url(url)), *url_secrets(url))) == message:
            raise
        raise AlertError(f"posting to the webhook {redact_url(url)} failed: {redacted}") from None


class AlertError(RuntimeError):
    pass


def drift_alerts(sweep: str, leaderboard: dg.AssetKey, name: str) -> dg.SensorDefinition:
    check = dg.AssetCheckKey(leaderboard, "nightly_drift")

    @dg.sensor(
        name=name,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Posts each failed nightly_drift check of sweep {sweep}'s leaderboard to $RAG_ALERT_WEBHOOK.",
    )
    def _alerts(context: dg.SensorEvaluationContext):
        webhook, ui = alert_settings()  # a webhook that is not http(s): the tick fails, the cursor stays
        if not webhook:
            return dg.SkipReason("RAG_ALERT_WEBHOOK is not set: no alert is sent")
        seen = int(context.cursor or 0)
        records = context.instance.event_log_storage.get_asset_check_execution_history(check, limit=50)
        sent = seen
        for record in sorted(records, key=lambda r: r.id):
            if record.id <= seen or record.event is None or record.event.dagster_event is None:
                continue
            evaluation = record.event.dagster_event.event_specific_data
            alert = getattr(evaluation, "metadata", {}).get("alert")
            if getattr(evaluation, "passed", True) or alert is None:
                sent = max(sent, record.id)
                continue
            body = {
                **alert.value,
                "link": f"{ui}/assets/{'/'.join(leaderboard.path)}",
                "dagster_run_id": record.run_id,
            }
            post_json(
                webhook, body
            )  # a failure raises: the sensor tick fails and the alert is sent next tick
            context.log.info(f"sent a {body['severity']} drift alert of {sweep} to the webhook")
            sent = max(sent, record.id)
        context.update_cursor(str(sent))
        return dg.SkipReason(f"alerts sent up to check evaluation {sent}")

    return _alerts
