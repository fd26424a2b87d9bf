//! Statements of one fixed text over array parameters, on PostgreSQL. A group of any size
//! is the same statement — `INSERT … SELECT * FROM unnest($1::text[], …)` — so each
//! connection prepares it once and PostgreSQL plans it once (a generic plan after its
//! first few executions), where a multi-row `VALUES` is a statement of its own for every
//! group size, parsed, analysed and planned on every execution (diesel cannot cache it).
//!
//! Behind a transaction pooler the statement cache is off: the text is still one, but
//! parsed each time like any other statement.

use diesel::expression::AsExpression;
use diesel::pg::Pg;
use diesel::query_builder::{AstPass, Query, QueryFragment, QueryId};
use diesel::sql_types::{Array, SqlType};
use diesel::{PgConnection, QueryResult, RunQueryDsl};
use std::marker::PhantomData;

/// A statement's one text, each `?` an array parameter in order, named by the type that
/// implements it (an uninhabited type of the caller's): diesel's statement cache keys on
/// that type, so the text belongs to it and can be no other.
pub trait ArraySql: 'static {
    const SQL: &'static str;
}

/// The statement `Id::SQL` with its values bound. `Row` is the SQL type of what it returns.
pub struct ArrayStatement<'a, Id, Row> {
    binds: Vec<Box<dyn QueryFragment<Pg> + Send + 'a>>,
    shape: PhantomData<fn() -> (Id, Row)>,
}

impl<Id: ArraySql, Row> Default for ArrayStatement<'_, Id, Row> {
    fn default() -> Self {
        Self {
            binds: Vec::new(),
            shape: PhantomData,
        }
    }
}

impl<'a, Id: ArraySql, Row> ArrayStatement<'a, Id, Row> {
    pub fn new() -> Self {
        Self::default()
    }

    /// Binds the next `?` to `values`, an array of `T`.
    pub fn bind<T, V>(mut self, values: V) -> Self
    where
        T: SqlType + 'static,
        V: AsExpression<Array<T>>,
        V::Expression: QueryFragment<Pg> + Send + 'a,
    {
        self.binds.push(Box::new(values.as_expression()));
        self
    }
}

impl<Id: ArraySql, Row> QueryId for ArrayStatement<'_, Id, Row> {
    type QueryId = Id;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Id, Row: SqlType> Query for ArrayStatement<'_, Id, Row> {
    type SqlType = Row;
}

impl<Id: ArraySql, Row> QueryFragment<Pg> for ArrayStatement<'_, Id, Row> {
    fn walk_ast<'b>(&'b self, mut out: AstPass<'_, 'b, Pg>) -> QueryResult<()> {
        let mut parts = Id::SQL.split('?');
        if let Some(first) = parts.next() {
            out.push_sql(first);
        }
        let mut binds = self.binds.iter();
        for part in parts {
            let bind = binds.next().ok_or_else(|| {
                diesel::result::Error::QueryBuilderError(
                    "an array statement has more parameters than values".into(),
                )
            })?;
            bind.walk_ast(out.reborrow())?;
            out.push_sql(part);
        }
        match binds.next() {
            Some(_) => Err(diesel::result::Error::QueryBuilderError(
                "an array statement has more values than parameters".into(),
            )),
            None => Ok(()),
        }
    }
}

impl<Id: ArraySql, Row> RunQueryDsl<PgConnection> for ArrayStatement<'_, Id, Row> {}

#[cfg(test)]
mod tests {
    use super::*;
    use diesel::sql_types::{BigInt, Text};

    enum Probe {}
    impl ArraySql for Probe {
        const SQL: &'static str = "SELECT count(*) FROM unnest(?::text[], ?::text[])";
    }

    fn text(statement: &ArrayStatement<'_, Probe, BigInt>) -> String {
        diesel::debug_query::<Pg, _>(statement).to_string()
    }

    #[test]
    fn each_question_mark_is_the_next_array_parameter() {
        let statement = ArrayStatement::<Probe, BigInt>::new()
            .bind::<Text, _>(vec!["a", "b"])
            .bind::<Text, _>(vec!["c", "d"]);
        let shown = text(&statement);
        assert!(
            shown.starts_with("SELECT count(*) FROM unnest($1::text[], $2::text[])"),
            "{shown}"
        );
    }

    #[test]
    fn a_missing_or_extra_value_is_an_error_not_a_statement() {
        let short = ArrayStatement::<Probe, BigInt>::new().bind::<Text, _>(vec!["a"]);
        let long = ArrayStatement::<Probe, BigInt>::new()
            .bind::<Text, _>(vec!["a"])
            .bind::<Text, _>(vec!["b"])
            .bind::<Text, _>(vec!["c"]);
        for statement in [short, long] {
            let mut builder = diesel::pg::PgQueryBuilder::default();
            assert!(statement.to_sql(&mut builder, &Pg).is_err());
        }
    }
}
