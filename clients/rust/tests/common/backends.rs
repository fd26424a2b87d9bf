//! The application's side of the diesel tests: a scratch database per backend behind an
//! r2d2 pool, the inbox table, and a payments table the handler writes to.

use super::{ScratchPostgres, ScratchSqlite};
use diesel::connection::SimpleConnection;
use diesel::r2d2::{ConnectionManager, Pool};
use diesel::sql_types::{BigInt, Text};
use diesel::{PgConnection, QueryableByName, RunQueryDsl, SqliteConnection};
use inlet_inbox::diesel::{create_table, InboxConnection, SqliteSetup};
use inlet_inbox::Verified;

pub type HandlerError = Box<dyn std::error::Error + Send + Sync>;

/// A backend under test: its scratch database (kept alive by the guard) and a pool.
pub trait Backend: InboxConnection + Statements + diesel::r2d2::R2D2Connection + 'static {
    type Guard;
    fn open(label: &str) -> (Self::Guard, Pool<ConnectionManager<Self>>);
}

impl Backend for SqliteConnection {
    type Guard = ScratchSqlite;
    fn open(label: &str) -> (ScratchSqlite, Pool<ConnectionManager<Self>>) {
        let scratch = ScratchSqlite::new(label);
        let pool = Pool::builder()
            .max_size(25)
            .connection_customizer(Box::new(SqliteSetup::default()))
            .build(ConnectionManager::new(scratch.url()))
            .expect("a SQLite pool");
        prepare(&pool);
        (scratch, pool)
    }
}

impl Backend for PgConnection {
    type Guard = ScratchPostgres;
    fn open(label: &str) -> (ScratchPostgres, Pool<ConnectionManager<Self>>) {
        let scratch = ScratchPostgres::new(label);
        let pool = Pool::builder()
            .max_size(25)
            .build(ConnectionManager::new(scratch.url.clone()))
            .expect("a PostgreSQL pool");
        prepare(&pool);
        (scratch, pool)
    }
}

/// The inbox table and the application's own: a payments table with no unique key, so a
/// handler run twice shows as two rows.
fn prepare<C: Backend>(pool: &Pool<ConnectionManager<C>>) {
    let mut conn = pool.get().expect("a connection");
    create_table(&mut *conn).expect("the inbox table");
    create_table(&mut *conn).expect("idempotent");
    conn.batch_execute("CREATE TABLE payments (message_id TEXT NOT NULL, amount BIGINT NOT NULL)")
        .expect("the payments table");
}

/// The handler under test: one payment row, in the claim's transaction.
pub fn record_payment<C: Backend>(conn: &mut C, delivery: &Verified) -> Result<(), HandlerError> {
    C::insert_payment(conn, delivery.message_id())?;
    Ok(())
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

pub fn count<C: Backend>(pool: &Pool<ConnectionManager<C>>, table: &str) -> i64 {
    let mut conn = pool.get().expect("a connection");
    C::count(&mut conn, table)
}

macro_rules! statements {
    ($connection:ty, $insert:literal, $lock_waits:expr) => {
        impl Statements for $connection {
            fn run(conn: &mut Self, sql: &str) -> usize {
                diesel::sql_query(sql)
                    .execute(conn)
                    .expect("the statement runs")
            }

            fn lock_waits(conn: &mut Self) -> Option<i64> {
                let query: Option<&str> = $lock_waits;
                query.map(|query| {
                    diesel::sql_query(query)
                        .get_result::<Count>(conn)
                        .expect("a count")
                        .n
                })
            }

            fn insert_payment(conn: &mut Self, id: &str) -> diesel::QueryResult<usize> {
                diesel::sql_query($insert)
                    .bind::<Text, _>(id)
                    .bind::<BigInt, _>(1200_i64)
                    .execute(conn)
            }

            fn count(conn: &mut Self, table: &str) -> i64 {
                diesel::sql_query(format!("SELECT COUNT(*) AS n FROM {table}"))
                    .get_result::<Count>(conn)
                    .expect("a count")
                    .n
            }
        }
    };
}

/// The application's own statements, per backend.
pub trait Statements {
    /// Runs a statement of the test's own.
    fn run(conn: &mut Self, sql: &str) -> usize;
    /// Sessions of this database waiting on a lock, where the database can tell (SQLite's
    /// busy wait is inside the waiting connection, invisible to SQL).
    fn lock_waits(conn: &mut Self) -> Option<i64>;
    fn insert_payment(conn: &mut Self, id: &str) -> diesel::QueryResult<usize>;
    fn count(conn: &mut Self, table: &str) -> i64;
}

statements!(
    PgConnection,
    "INSERT INTO payments VALUES ($1, $2)",
    Some(
        "SELECT COUNT(*) AS n FROM pg_stat_activity \
         WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
);
statements!(SqliteConnection, "INSERT INTO payments VALUES (?, ?)", None);
