//! Health and readiness. (The database going away is in `tests/outage.rs`.)

use crate::helpers::{spawn_app, Backend};
use crate::on_both_backends;

on_both_backends!(health_and_readiness_answer);

async fn health_and_readiness_answer(backend: Backend) {
    let app = spawn_app(backend).await;
    let health = app.get("/healthz").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.json()["status"], "ok");
    let ready = app.get("/readyz").await;
    ready.assert_status(200);
    assert_eq!(ready.json()["database"], "ok");
}
