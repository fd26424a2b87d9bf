//! The claim in the application's own transaction, on diesel, on SQLite and PostgreSQL:
//! duplicates, fifty concurrent copies, a crash after the commit, a rollback, a copy
//! waiting on a transaction that rolls back, force, purge.

mod common;

use chrono::{Duration as Days, TimeZone, Utc};
use common::backends::{count, record_payment, Backend, HandlerError};
use common::delivery;
use diesel::r2d2::{ConnectionManager, Pool};
use inlet_inbox::diesel::{claim, process, purge};
use inlet_inbox::{Claim, Dialect, Error, Force, DEFAULT_PURGE_WINDOW};
use std::sync::mpsc;
use std::time::Duration;

fn deliver<C: Backend>(pool: &Pool<ConnectionManager<C>>, id: &str) -> Result<Claim, HandlerError> {
    let mut conn = pool.get()?;
    process(
        &mut *conn,
        "payments",
        &delivery(id),
        Force::No,
        record_payment::<C>,
    )
}

fn a_copy_is_a_duplicate_and_the_handler_runs_once<C: Backend>() {
    let (_db, pool) = C::open("copy");
    assert_eq!(deliver(&pool, "stripe:evt_1").expect("applied"), Claim::New);
    // The response was lost after the commit (a crash, a reset): Inlet sends it again.
    for _ in 0..3 {
        assert_eq!(
            deliver(&pool, "stripe:evt_1").expect("answered"),
            Claim::Duplicate
        );
    }
    assert_eq!(deliver(&pool, "stripe:evt_2").expect("applied"), Claim::New);
    assert_eq!(count(&pool, "payments"), 2);
    // Another consumer sees the message once too.
    let mut conn = pool.get().expect("a connection");
    let other = process(
        &mut *conn,
        "ledger",
        &delivery("stripe:evt_1"),
        Force::No,
        |_, _| Ok::<_, HandlerError>(()),
    );
    assert_eq!(other.expect("applied"), Claim::New);
}

fn fifty_concurrent_copies_run_the_handler_once<C: Backend>() {
    let (_db, pool) = C::open("fifty");
    let claims: Vec<Claim> = std::thread::scope(|scope| {
        let copies: Vec<_> = (0..50)
            .map(|_| {
                let pool = &pool;
                scope.spawn(move || {
                    let mut conn = pool.get().expect("a connection");
                    process(
                        &mut *conn,
                        "payments",
                        &delivery("stripe:evt_50"),
                        Force::No,
                        |tx, d| {
                            // Hold the claim a moment, so the copies meet the open transaction.
                            std::thread::sleep(Duration::from_millis(20));
                            record_payment::<C>(tx, d)
                        },
                    )
                    .expect("every copy is answered")
                })
            })
            .collect();
        copies
            .into_iter()
            .map(|copy| copy.join().expect("no panic"))
            .collect()
    });
    assert_eq!(claims.iter().filter(|c| **c == Claim::New).count(), 1);
    assert_eq!(
        claims.iter().filter(|c| **c == Claim::Duplicate).count(),
        49
    );
    assert_eq!(count(&pool, "payments"), 1);
}

fn a_rollback_leaves_the_message_new<C: Backend>() {
    let (_db, pool) = C::open("rollback");
    let mut conn = pool.get().expect("a connection");
    let failed = process(
        &mut *conn,
        "payments",
        &delivery("stripe:evt_3"),
        Force::No,
        |tx, d| {
            record_payment::<C>(tx, d)?;
            Err::<(), HandlerError>("the ledger refused".into())
        },
    );
    assert_eq!(
        failed.expect_err("rolled back").to_string(),
        "the ledger refused"
    );
    assert_eq!(
        count(&pool, "payments"),
        0,
        "the handler's write rolled back"
    );
    assert_eq!(count(&pool, "inlet_inbox"), 0, "and the claim with it");
    assert_eq!(
        deliver(&pool, "stripe:evt_3").expect("the retry runs"),
        Claim::New
    );
    assert_eq!(count(&pool, "payments"), 1);
}

/// A copy arriving while the first transaction is open waits on the key; when the first
/// rolls back, the copy claims the message and runs.
fn a_waiting_copy_runs_when_the_first_rolls_back<C: Backend>() {
    let (_db, pool) = C::open("waiting");
    let (claimed_tx, claimed) = mpsc::channel();
    let (release_tx, release) = mpsc::channel::<()>();
    std::thread::scope(|scope| {
        let pool = &pool;
        let first = scope.spawn(move || {
            let mut conn = pool.get().expect("a connection");
            process(
                &mut *conn,
                "payments",
                &delivery("stripe:evt_4"),
                Force::No,
                |tx, d| {
                    record_payment::<C>(tx, d)?;
                    claimed_tx.send(()).expect("the test waits");
                    release.recv().expect("the test releases");
                    Err::<(), HandlerError>("the first attempt fails".into())
                },
            )
        });
        claimed
            .recv_timeout(Duration::from_secs(30))
            .expect("the first claimed");
        let (started_tx, started) = mpsc::channel();
        let copy = scope.spawn(move || {
            started_tx.send(()).expect("the test waits");
            deliver(pool, "stripe:evt_4")
        });
        started
            .recv_timeout(Duration::from_secs(30))
            .expect("the copy started");
        // On PostgreSQL, see the copy wait on the first's key before releasing it.
        let mut watcher = pool.get().expect("a connection");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while C::lock_waits(&mut watcher).is_some_and(|waits| waits == 0) {
            assert!(
                std::time::Instant::now() < deadline,
                "the copy never waited on the key"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        release_tx.send(()).expect("the first waits");
        assert!(first.join().expect("no panic").is_err());
        assert_eq!(
            copy.join().expect("no panic").expect("the copy ran"),
            Claim::New
        );
    });
    assert_eq!(count(&pool, "payments"), 1);
}

fn force_reruns_and_a_failed_rerun_keeps_the_first_claim<C: Backend>() {
    let (_db, pool) = C::open("force");
    assert_eq!(deliver(&pool, "stripe:evt_5").expect("applied"), Claim::New);
    let mut conn = pool.get().expect("a connection");
    let failed = process(
        &mut *conn,
        "payments",
        &delivery("stripe:evt_5"),
        Force::Rerun,
        |_, _| Err::<(), HandlerError>("still wrong".into()),
    );
    assert!(failed.is_err());
    assert_eq!(
        deliver(&pool, "stripe:evt_5").expect("answered"),
        Claim::Duplicate
    );
    let rerun = process(
        &mut *conn,
        "payments",
        &delivery("stripe:evt_5"),
        Force::Rerun,
        record_payment::<C>,
    );
    assert_eq!(rerun.expect("re-run"), Claim::New);
    assert_eq!(
        count(&pool, "payments"),
        2,
        "the re-run ran the handler again, on purpose"
    );
    assert_eq!(
        deliver(&pool, "stripe:evt_5").expect("answered"),
        Claim::Duplicate
    );
    assert_eq!(count(&pool, "inlet_inbox"), 1);
}

fn purge_deletes_only_rows_past_the_window<C: Backend>() {
    let (_db, pool) = C::open("purge");
    let mut conn = pool.get().expect("a connection");
    // A row claimed at a known instant, as each backend writes claimed_at.
    let claimed_at = match C::DIALECT {
        Dialect::Postgres => "'2026-01-01 00:00:00+00'",
        Dialect::Sqlite => "'2026-01-01 00:00:00'",
    };
    let inserted = C::run(
        &mut conn,
        &format!(
            "INSERT INTO inlet_inbox (consumer, message_id, claimed_at) \
             VALUES ('payments', 'stripe:evt_6', {claimed_at})"
        ),
    );
    assert_eq!(inserted, 1, "a claim of 2026-01-01");
    let claimed = Utc
        .with_ymd_and_hms(2026, 1, 1, 0, 0, 0)
        .single()
        .expect("a time");
    let window = Days::from_std(DEFAULT_PURGE_WINDOW).expect("75 days");
    let purged = |conn: &mut C, now| purge(conn, DEFAULT_PURGE_WINDOW, now).expect("purged");
    assert_eq!(purged(&mut conn, claimed + window - Days::seconds(1)), 0);
    assert!(matches!(
        purge(&mut *conn, Duration::from_secs(600), claimed + window),
        Err(Error::PurgeWindow(_))
    ));
    assert_eq!(count(&pool, "inlet_inbox"), 1);
    assert_eq!(purged(&mut conn, claimed + window + Days::seconds(1)), 1);
    assert_eq!(count(&pool, "inlet_inbox"), 0);
    // A claim made now is kept by a purge now.
    deliver(&pool, "stripe:evt_7").expect("applied");
    assert_eq!(purged(&mut conn, Utc::now()), 0);
}

fn a_claim_outside_a_transaction_or_with_no_name_is_refused<C: Backend>() {
    let (_db, pool) = C::open("refused");
    let mut pooled = pool.get().expect("a connection");
    let conn: &mut C = &mut pooled;
    assert!(matches!(
        claim(conn, "payments", "stripe:evt_7", Force::No),
        Err(Error::NotInTransaction)
    ));
    let empty =
        conn.transaction(|tx| claim(tx, "", "stripe:evt_7", Force::No).map_err(HandlerError::from));
    assert!(empty.is_err());
    let empty =
        conn.transaction(|tx| claim(tx, "payments", "", Force::No).map_err(HandlerError::from));
    assert!(empty.is_err());
    // process begins (and commits) its own transaction: inside another it would answer
    // before the real commit.
    let nested = conn.transaction(|tx| {
        let inner = process(
            tx,
            "payments",
            &delivery("stripe:evt_8"),
            Force::No,
            record_payment::<C>,
        );
        assert!(inner.is_err_and(|e| e.to_string().contains("its own transaction")));
        Ok::<_, HandlerError>(())
    });
    assert!(nested.is_ok());
    assert_eq!(count(&pool, "inlet_inbox"), 0);
    assert_eq!(count(&pool, "payments"), 0);
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(#[test] fn $case() { super::$case::<diesel::SqliteConnection>() })*
        }
        mod postgres {
            $(#[test] fn $case() { super::$case::<diesel::PgConnection>() })*
        }
    };
}

on_both_backends!(
    a_copy_is_a_duplicate_and_the_handler_runs_once,
    fifty_concurrent_copies_run_the_handler_once,
    a_rollback_leaves_the_message_new,
    a_waiting_copy_runs_when_the_first_rolls_back,
    force_reruns_and_a_failed_rerun_keeps_the_first_claim,
    purge_deletes_only_rows_past_the_window,
    a_claim_outside_a_transaction_or_with_no_name_is_refused,
);
