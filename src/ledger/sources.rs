//! Which source names the database holds anything under: deduplication is keyed on the
//! source name (`events(source, event_id)`, `facts(source, kind, fact_key)`), so a name
//! that disappears from the configuration while its rows remain — a rename — would let
//! every copy of its events be accepted again under the new name.

use crate::db::{on_connection, DbConnection, DbPool};
use diesel::prelude::*;
use diesel::sql_types::{Nullable, Text};
use std::collections::BTreeSet;

/// The tables keyed on the source name, each with an index that starts with it.
const TABLES: [&str; 3] = ["facts", "events", "deliveries"];

#[derive(QueryableByName)]
struct Name {
    #[diesel(sql_type = Nullable<Text>)]
    name: Option<String>,
}

/// Every source name with a fact (permanent), an event (until swept) or a delivery in the
/// database. Each table is read as a skip scan of its index — one index probe per
/// distinct name, however many rows — so it is cheap on a large database.
pub fn stored_sources(conn: &mut DbConnection) -> QueryResult<BTreeSet<String>> {
    let mut names = BTreeSet::new();
    for table in TABLES {
        // A recursive CTE that both backends run as a loose index scan: each step asks
        // the index for the smallest name after the last one.
        let query = format!(
            "WITH RECURSIVE names(name) AS (\
               SELECT (SELECT MIN(source) FROM {table}) \
               UNION ALL \
               SELECT (SELECT MIN(source) FROM {table} WHERE source > names.name) \
               FROM names WHERE names.name IS NOT NULL\
             ) SELECT name FROM names WHERE name IS NOT NULL"
        );
        let rows: Vec<Name> = diesel::sql_query(query).load(conn)?;
        names.extend(rows.into_iter().filter_map(|row| row.name));
    }
    Ok(names)
}

/// [`stored_sources`] on a pooled connection, off the executor.
pub async fn stored_sources_in(pool: &DbPool) -> anyhow::Result<BTreeSet<String>> {
    on_connection(pool, |conn| -> anyhow::Result<_> {
        Ok(stored_sources(conn)?)
    })
    .await
}
