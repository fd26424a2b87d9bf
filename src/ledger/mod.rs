//! The ledger of facts: which real-world fact an event describes, and the permanent
//! UNIQUE(source, kind, fact_key) row that makes its effect happen once.
//!
//! By default a fact is the event itself (kind = event type, key = event id). A fact rule
//! keys once-per-object event types on the object instead, so the same payment arriving
//! under another event id has no second effect. Update-like types (`*.updated`) are never
//! keyed on the object alone: distinct updates are distinct facts.

mod sources;

pub use sources::{stored_sources, stored_sources_in};

use crate::db::arrays::{ArraySql, ArrayStatement};
use crate::db::schema::facts;
use crate::db::{dialect, DbConnection};
use crate::identity::{EventId, FactKey, Field, IdentityError, JsonPointer};
use chrono::NaiveDateTime;
use diesel::prelude::*;
use diesel::sql_types::{Text, Timestamp};
use serde_json::Value;
use std::collections::HashSet;

/// The fact kind of an event whose provider names no type.
pub const UNTYPED_KIND: &str = "event";

/// The fact kind of an event keyed on its body's digest: the signed body is the fact,
/// whatever type its unsigned headers claim.
pub const BODY_KIND: &str = "body";

/// Keys the facts of the listed event types on the value at `key`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FactRule {
    types: Vec<String>,
    key: JsonPointer,
}

impl FactRule {
    pub fn new(types: Vec<String>, key: JsonPointer) -> Self {
        Self { types, key }
    }

    /// `"a, b → /data/object/id"`: the types and where their fact key is.
    pub fn describe(&self) -> String {
        format!("{} → {}", self.types.join(", "), self.key.as_str())
    }

    /// Update-like types must never be keyed on the object alone.
    pub fn update_like_type(&self) -> Option<&str> {
        self.types
            .iter()
            .map(String::as_str)
            .find(|t| t.ends_with(".updated"))
    }

    fn applies_to(&self, event_type: &str) -> bool {
        self.types.iter().any(|t| t == event_type)
    }
}

/// Which fact an event describes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FactIdentity {
    pub kind: String,
    pub key: String,
}

impl FactIdentity {
    /// The fact of an event: the first rule that names its type keys it on the object;
    /// otherwise the source's fact key when the request carries one (a configured
    /// `fact_key`, or the body's digest where the event id is unsigned — then of kind
    /// [`BODY_KIND`]); otherwise the event is its own fact.
    pub fn of_event(
        rules: &[FactRule],
        event_type: Option<&str>,
        event_id: &EventId,
        document: Option<&Value>,
        fact_key: Option<&FactKey>,
    ) -> Result<Self, IdentityError> {
        let mut kind = event_type.unwrap_or(UNTYPED_KIND).to_owned();
        let rule = event_type.and_then(|t| rules.iter().find(|rule| rule.applies_to(t)));
        let key = match rule {
            None => match fact_key {
                None => event_id.as_str().to_owned(),
                Some(FactKey::Located(key)) => key.clone(),
                Some(FactKey::BodyDigest(digest)) => {
                    BODY_KIND.clone_into(&mut kind);
                    digest.clone()
                }
            },
            Some(rule) => document
                .and_then(|doc| rule.key.key_in(doc))
                .ok_or_else(|| {
                    IdentityError::MissingFactKey(format!(
                        "events of type {kind} are one fact per object, keyed on {}, which \
                         this body does not hold as a string or number",
                        rule.key.as_str()
                    ))
                })?,
        };
        Field::FactKey.check(&key)?;
        Ok(Self { kind, key })
    }
}

/// A fact about to be recorded.
#[derive(Debug, Insertable)]
#[diesel(table_name = facts, treat_none_as_default_value = false)]
pub struct NewFact<'a> {
    pub source: &'a str,
    pub kind: &'a str,
    pub fact_key: &'a str,
    pub first_event_id: &'a str,
    pub created_at: NaiveDateTime,
}

impl NewFact<'_> {
    /// Records the fact with `INSERT … ON CONFLICT DO NOTHING RETURNING`: `true` when it
    /// is new, `false` when the ledger already held it (a concurrent recorder of the same
    /// fact is waited for on the unique index).
    pub fn record(&self, conn: &mut DbConnection) -> QueryResult<bool> {
        let inserted: Option<i64> = dialect!(conn, c => diesel::insert_into(facts::table)
            .values(self)
            .on_conflict((facts::source, facts::kind, facts::fact_key))
            .do_nothing()
            .returning(facts::id)
            .get_result(c)
            .optional())?;
        Ok(inserted.is_some())
    }
}

/// `(source, kind, fact_key)`: what the ledger is unique on.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LedgerKey {
    pub source: String,
    pub fact: FactIdentity,
}

/// Records a group's facts with one `INSERT … ON CONFLICT DO NOTHING RETURNING`: the
/// facts that are new. The rest the ledger already held (a concurrent recorder of the same
/// fact is waited for on the unique index). `facts` must hold each fact once, sorted, so
/// concurrent groups lock them in one order.
pub fn record_all(
    conn: &mut DbConnection,
    facts: &[NewFact<'_>],
) -> QueryResult<HashSet<LedgerKey>> {
    if facts.is_empty() {
        return Ok(Default::default());
    }
    let inserted: Vec<(String, String, String)> = match conn {
        DbConnection::Postgres(c) => record_statement(facts).get_results(c)?,
        DbConnection::Sqlite(c) => diesel::insert_into(facts::table)
            .values(facts)
            .on_conflict((facts::source, facts::kind, facts::fact_key))
            .do_nothing()
            .returning((facts::source, facts::kind, facts::fact_key))
            .get_results(c)?,
    };
    Ok(inserted
        .into_iter()
        .map(|(source, kind, key)| LedgerKey {
            source,
            fact: FactIdentity { kind, key },
        })
        .collect())
}

/// [`record_all`] on PostgreSQL: one statement text over one array per column, whatever
/// the group's size (see `db::arrays`).
fn record_statement<'a>(
    facts: &'a [NewFact<'a>],
) -> ArrayStatement<'a, RecordFacts, (Text, Text, Text)> {
    let column = |f: fn(&'a NewFact<'a>) -> &'a str| facts.iter().map(f).collect::<Vec<_>>();
    ArrayStatement::new()
        .bind::<Text, _>(column(|f| f.source))
        .bind::<Text, _>(column(|f| f.kind))
        .bind::<Text, _>(column(|f| f.fact_key))
        .bind::<Text, _>(column(|f| f.first_event_id))
        .bind::<Timestamp, _>(facts.iter().map(|f| f.created_at).collect::<Vec<_>>())
}

/// The record statement's name in each connection's statement cache.
enum RecordFacts {}

impl ArraySql for RecordFacts {
    const SQL: &'static str =
        "INSERT INTO facts (source, kind, fact_key, first_event_id, created_at) \
         SELECT * FROM unnest(?::text[], ?::text[], ?::text[], ?::text[], ?::timestamp[]) \
         ON CONFLICT (source, kind, fact_key) DO NOTHING RETURNING source, kind, fact_key";
}

/// The event id under which a fact was first recorded.
pub fn first_event_id(
    conn: &mut DbConnection,
    source: &str,
    fact: &FactIdentity,
) -> QueryResult<String> {
    facts::table
        .filter(facts::source.eq(source))
        .filter(facts::kind.eq(&fact.kind))
        .filter(facts::fact_key.eq(&fact.key))
        .select(facts::first_event_id)
        .first(conn)
}

/// [`first_event_id`], or `None` when the ledger does not hold the fact.
pub fn find_first_event_id(
    conn: &mut DbConnection,
    source: &str,
    fact: &FactIdentity,
) -> QueryResult<Option<String>> {
    first_event_id(conn, source, fact).optional()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules() -> Vec<FactRule> {
        vec![FactRule::new(
            vec!["payment_intent.succeeded".into()],
            JsonPointer::parse("/data/object/id").unwrap(),
        )]
    }

    #[test]
    fn once_per_object_types_key_on_the_object() {
        let doc = json!({"data": {"object": {"id": "pi_1"}}});
        let id = EventId::parse("evt_1").unwrap();
        let fact = FactIdentity::of_event(
            &rules(),
            Some("payment_intent.succeeded"),
            &id,
            Some(&doc),
            None,
        )
        .unwrap();
        assert_eq!(
            fact,
            FactIdentity {
                kind: "payment_intent.succeeded".into(),
                key: "pi_1".into()
            }
        );
    }

    #[test]
    fn other_types_are_their_own_fact() {
        let doc = json!({"data": {"object": {"id": "sub_1"}}});
        let id = EventId::parse("evt_2").unwrap();
        let fact = FactIdentity::of_event(
            &rules(),
            Some("customer.subscription.updated"),
            &id,
            Some(&doc),
            None,
        )
        .unwrap();
        assert_eq!(fact.key, "evt_2");
        let untyped = FactIdentity::of_event(&rules(), None, &id, None, None).unwrap();
        assert_eq!(
            untyped,
            FactIdentity {
                kind: UNTYPED_KIND.into(),
                key: "evt_2".into()
            }
        );
    }

    #[test]
    fn a_body_digest_key_makes_the_body_the_fact_whatever_its_type() {
        let digest = FactKey::BodyDigest("ab12".into());
        for (id, event_type) in [("d-1", "push"), ("d-2", "issues")] {
            let id = EventId::parse(id).unwrap();
            let fact = FactIdentity::of_event(&rules(), Some(event_type), &id, None, Some(&digest))
                .unwrap();
            assert_eq!(
                fact,
                FactIdentity {
                    kind: BODY_KIND.into(),
                    key: "ab12".into()
                }
            );
        }
        let located = FactKey::Located("evt_shop".into());
        let id = EventId::parse("w-1").unwrap();
        let fact =
            FactIdentity::of_event(&rules(), Some("orders/create"), &id, None, Some(&located))
                .unwrap();
        assert_eq!(fact.kind, "orders/create");
        assert_eq!(fact.key, "evt_shop");
    }

    #[test]
    fn a_missing_object_key_is_refused_not_guessed() {
        let id = EventId::parse("evt_3").unwrap();
        for doc in [
            json!({}),
            json!({"data": {"object": {"id": ""}}}),
            json!({"data": {"object": {"id": null}}}),
        ] {
            let err = FactIdentity::of_event(
                &rules(),
                Some("payment_intent.succeeded"),
                &id,
                Some(&doc),
                None,
            )
            .unwrap_err();
            assert!(matches!(err, IdentityError::MissingFactKey(_)), "{err}");
        }
    }
}
