//! `kill -9` of a real `inlet serve` at random moments under signed load (about 30 %
//! duplicates) with a live destination, round after round on one database. After each
//! kill: restart, the provider's retries of what was never acknowledged, a drain of the
//! outbox, then the invariants — every acknowledged event stored with its fact, one fact
//! per fact, every fact delivered, nothing left `in_progress` past its lease.

use crate::helpers::Backend;
use crate::load::{retry_unacknowledged, Ledger, Load};
use crate::support::{
    assert_none, check_invariants, drained, kill_9, knob, report, seeded, serve, stop,
    stored_and_applied, Rig, Snapshot, DELIVERY_CONCURRENCY,
};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

chaos_on_both_backends!(kill_9_under_load_loses_nothing);

/// Concurrent clients of the load (the claims are about concurrency: well over 20).
const CLIENTS: usize = 24;

async fn kill_9_under_load_loses_nothing(backend: Backend) {
    let rounds = knob("INLET_CHAOS_ROUNDS", 10);
    let mut rng = seeded(&format!("kill -9 ({backend:?})"));
    let started = Instant::now();
    let rig = Rig::fresh(backend, "kill", 0.05).await;
    let (app, url) = (&rig.app, &rig.url);

    let ledger: Arc<Mutex<Ledger>> = Arc::default();
    let mut process = serve(&rig.config).await;
    let target = Arc::new(AtomicU16::new(process.port));
    let mut kill_moments = Vec::new();
    let mut retried = 0;
    let mut held_at_kill = 0;
    let mut applied_twice_before = 0;
    for round in 1..=rounds {
        let load = Load::start(
            ledger.clone(),
            target.clone(),
            CLIENTS,
            &format!("r{round}"),
            rng.u64(..),
        );
        // Anywhere from just after start-up to a few seconds into the load. Real time must
        // pass: the kill comes at a random moment of the load, not after anything.
        let moment = Duration::from_millis(rng.u64(0..3_000));
        tokio::time::sleep(moment).await;
        kill_9(process).await;
        kill_moments.push(moment.as_millis());
        load.stop().await;
        // What the dead process held: leased rows nobody will mark, until the lease ends.
        held_at_kill += Snapshot::read(url)
            .await
            .delivery_statuses()
            .get("in_progress")
            .copied()
            .unwrap_or(0);

        process = serve(&rig.config).await;
        target.store(process.port, Ordering::SeqCst);
        retried += retry_unacknowledged(&ledger, process.port).await;
        let snapshot = drained(url, Duration::from_secs(60)).await;

        let ledger = ledger.lock().expect("ledger");
        let log = app.log();
        let mut failures = check_invariants(&snapshot, &ledger.acknowledged(), &log);
        failures.extend(ledger.stored_answer_differences());
        failures.extend(ledger.unexpected.iter().cloned());
        // A second application of a key needs a crash between the application's answer
        // and Inlet recording it: at most the deliveries in flight when it was killed.
        let applied_twice = log.applied_more_than_once();
        if applied_twice - applied_twice_before > DELIVERY_CONCURRENCY {
            failures.push(format!(
                "{} keys applied again in one round, more than the {DELIVERY_CONCURRENCY} \
                 deliveries a process has in flight",
                applied_twice - applied_twice_before
            ));
        }
        applied_twice_before = applied_twice;
        assert_none(&format!("{backend:?} round {round}"), &failures);
        println!(
            "chaos kill -9 ({backend:?}) round {round}/{rounds}: killed after {} ms; {} events \
             acknowledged so far, {} facts, outbox drained",
            moment.as_millis(),
            ledger.acknowledged().len(),
            snapshot.fact_rows
        );
    }

    // A clean stop of the last process, then the figures.
    stop(process).await;
    let snapshot = Snapshot::read(url).await;
    let ledger = ledger.lock().expect("ledger");
    let acknowledged = ledger.acknowledged();
    assert!(
        acknowledged.len() as u64 > 50 * rounds,
        "the load ran: {} events acknowledged",
        acknowledged.len()
    );
    report(&format!(
        "kill -9 ({backend:?}): {rounds} rounds of {CLIENTS} clients, killed after {kill_moments:?} ms, {:.1} s\n\
         \x20 sent {} requests ({} exact duplicates, {} payments under a regenerated event id), \
         {} acknowledged (2xx), {} cut by the kill, statuses {:?}\n\
         \x20 {} distinct events acknowledged ({} only by the retry after a restart); \
         {held_at_kill} deliveries held in_progress by a killed process, all taken over \
         after the lease\n\
         \x20 {}",
        started.elapsed().as_secs_f64(),
        ledger.requests,
        ledger.duplicates_sent,
        ledger.regenerated_sent,
        ledger.acknowledged_requests(),
        ledger.connection_errors,
        ledger.statuses,
        acknowledged.len(),
        retried,
        stored_and_applied(&snapshot, &app.log()),
    ));
}
