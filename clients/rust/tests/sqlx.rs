//! The sqlx adapter and the axum endpoint, on SQLite and PostgreSQL: duplicates, fifty
//! concurrent copies, a rollback, force, purge, and the endpoint over real HTTP.
#![cfg(feature = "axum")]

mod common;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use chrono::{Duration as Days, Utc};
use common::http::{exercise, fails_once};
use common::{delivery, ScratchPostgres, ScratchSqlite};
use inlet_inbox::axum::{HandlerError, Receiver};
use inlet_inbox::sqlx::{claim, create_table, process, purge, BoxFuture, InboxDatabase};
use inlet_inbox::{Claim, Error, Force, Verified, DEFAULT_PURGE_WINDOW};
use sqlx::{Connection, Pool, Postgres, Sqlite};
use std::sync::Arc;

/// A database under test: its scratch database (kept alive by the guard), a pool, and the
/// application's own statements.
trait Backend: InboxDatabase {
    type Guard: Send;
    async fn open(label: &str) -> (Self::Guard, Pool<Self>);
    fn insert_payment<'c>(
        conn: &'c mut Self::Connection,
        id: &'c str,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;
    fn count(pool: &Pool<Self>, table: &str) -> impl std::future::Future<Output = i64> + Send;
}

macro_rules! backend {
    ($db:ty, $guard:ty, $make:expr, $connect:expr, $insert:literal) => {
        impl Backend for $db {
            type Guard = $guard;

            async fn open(label: &str) -> ($guard, Pool<Self>) {
                let guard = $make(label);
                let pool: Pool<Self> = $connect(&guard).await;
                let mut conn = pool.acquire().await.expect("a connection");
                create_table::<Self>(&mut conn)
                    .await
                    .expect("the inbox table");
                create_table::<Self>(&mut conn).await.expect("idempotent");
                sqlx::query(
                    "CREATE TABLE payments (message_id TEXT NOT NULL, amount BIGINT NOT NULL)",
                )
                .execute(&mut *conn)
                .await
                .expect("the payments table");
                (guard, pool)
            }

            fn insert_payment<'c>(
                conn: &'c mut Self::Connection,
                id: &'c str,
            ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    sqlx::query($insert)
                        .bind(id)
                        .bind(1200_i64)
                        .execute(conn)
                        .await?;
                    Ok(())
                })
            }

            async fn count(pool: &Pool<Self>, table: &str) -> i64 {
                let query = format!("SELECT COUNT(*) FROM {table}");
                sqlx::query_scalar(sqlx::AssertSqlSafe(query))
                    .fetch_one(pool)
                    .await
                    .expect("a count")
            }
        }
    };
}

backend!(
    Sqlite,
    ScratchSqlite,
    ScratchSqlite::new,
    |guard: &ScratchSqlite| {
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(&guard.path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(20));
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(25)
            .connect_with(options);
        async move { pool.await.expect("a SQLite pool") }
    },
    "INSERT INTO payments VALUES (?, ?)"
);

backend!(
    Postgres,
    ScratchPostgres,
    ScratchPostgres::new,
    |guard: &ScratchPostgres| {
        let url = guard.url.clone();
        async move {
            let pool = sqlx::postgres::PgPoolOptions::new().max_connections(25);
            pool.connect(&url).await.expect("a PostgreSQL pool")
        }
    },
    "INSERT INTO payments VALUES ($1, $2)"
);

/// The handler: records a payment; fails a `fail_once` delivery the first time.
fn handle<'c, DB: Backend>(
    conn: &'c mut DB::Connection,
    delivery: &'c Verified,
) -> BoxFuture<'c, Result<(), HandlerError>> {
    Box::pin(async move {
        DB::insert_payment(conn, delivery.message_id()).await?;
        match fails_once(delivery.message_id(), delivery.body()) {
            true => Err("the ledger is down".into()),
            false => Ok(()),
        }
    })
}

async fn deliver<DB: Backend>(
    pool: &Pool<DB>,
    id: &str,
    force: Force,
) -> Result<Claim, HandlerError> {
    process(pool, "payments", &delivery(id), force, handle::<DB>).await
}

async fn fifty_concurrent_copies_run_the_handler_once<DB: Backend>() {
    let (_db, pool) = DB::open("sqlx-fifty").await;
    let copies: Vec<_> = (0..50)
        .map(|_| {
            let pool = pool.clone();
            tokio::spawn(async move {
                let copy = delivery("stripe:evt_50");
                let outcome = process(&pool, "payments", &copy, Force::No, |conn, d| {
                    Box::pin(async move {
                        // Hold the claim a moment, so the copies meet the open transaction.
                        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                        DB::insert_payment(conn, d.message_id()).await?;
                        Ok::<(), HandlerError>(())
                    })
                });
                outcome.await.expect("answered")
            })
        })
        .collect();
    let mut new = 0;
    for copy in copies {
        new += usize::from(copy.await.expect("no panic") == Claim::New);
    }
    assert_eq!(new, 1);
    assert_eq!(DB::count(&pool, "payments").await, 1);
}

async fn claims_commit_with_the_handler<DB: Backend>() {
    let (_db, pool) = DB::open("sqlx").await;
    let deliver_once = |id: &'static str, force| {
        let pool = pool.clone();
        async move { deliver(&pool, id, force).await.expect("answered") }
    };
    assert_eq!(deliver_once("stripe:evt_1", Force::No).await, Claim::New);
    assert_eq!(
        deliver_once("stripe:evt_1", Force::No).await,
        Claim::Duplicate
    );
    // A rollback keeps nothing; the retry runs. A forced re-run runs again.
    let third = delivery("stripe:evt_3");
    let failed = process(&pool, "payments", &third, Force::No, |conn, d| {
        Box::pin(async move {
            DB::insert_payment(conn, d.message_id()).await?;
            Err::<(), HandlerError>("refused".into())
        })
    });
    assert!(failed.await.is_err());
    assert_eq!(DB::count(&pool, "payments").await, 1);
    assert_eq!(deliver_once("stripe:evt_3", Force::No).await, Claim::New);
    assert_eq!(deliver_once("stripe:evt_3", Force::Rerun).await, Claim::New);
    assert_eq!(
        deliver_once("stripe:evt_3", Force::No).await,
        Claim::Duplicate
    );
    assert_eq!(DB::count(&pool, "payments").await, 3);
    assert_eq!(DB::count(&pool, "inlet_inbox").await, 2);
}

async fn purge_and_refusals<DB: Backend>() {
    let (_db, pool) = DB::open("sqlx-purge").await;
    deliver(&pool, "stripe:evt_1", Force::No)
        .await
        .expect("applied");
    let mut conn = pool.acquire().await.expect("a connection");
    assert!(matches!(
        claim::<DB>(&mut conn, "payments", "x", Force::No).await,
        Err(Error::NotInTransaction)
    ));
    let now = Utc::now();
    let window = Days::from_std(DEFAULT_PURGE_WINDOW).expect("75 days");
    let mut purged = async |now| {
        purge::<DB>(&mut conn, DEFAULT_PURGE_WINDOW, now)
            .await
            .expect("purge")
    };
    assert_eq!(purged(now + window - Days::minutes(1)).await, 0);
    assert_eq!(purged(now + window + Days::minutes(1)).await, 1);
    let mut tx = conn.begin().await.expect("a transaction");
    assert_eq!(
        claim::<DB>(&mut tx, "payments", "stripe:evt_1", Force::No)
            .await
            .expect("claimed"),
        Claim::New
    );
}

async fn receive<DB: Backend>(
    State(receiver): State<Arc<Receiver<DB>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    receiver.respond(&headers, &body, handle::<DB>).await
}

async fn an_axum_endpoint_applies_each_delivery_once<DB: Backend>() {
    let (_db, pool) = DB::open("axum").await;
    let receiver = Arc::new(Receiver::new(pool.clone(), common::verifier(), "payments"));
    let app = Router::new()
        .route("/webhooks/inlet", post(receive::<DB>))
        .with_state(receiver);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a port");
    let url = format!(
        "http://{}/webhooks/inlet",
        listener.local_addr().expect("bound")
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let payments = move || {
        let pool = pool.clone();
        Box::pin(async move { DB::count(&pool, "payments").await }) as _
    };
    exercise(&url, &payments).await;
}

macro_rules! on_both_backends {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
              async fn $case() { super::$case::<sqlx::Sqlite>().await })*
        }
        mod postgres {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
              async fn $case() { super::$case::<sqlx::Postgres>().await })*
        }
    };
}

on_both_backends!(
    fifty_concurrent_copies_run_the_handler_once,
    claims_commit_with_the_handler,
    purge_and_refusals,
    an_axum_endpoint_applies_each_delivery_once
);
