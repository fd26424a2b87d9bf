//! The audit trail's page: who did what, when, from where, and what came of it.

use super::error::ConsoleError;
use super::pages::{choice, pager_href, parse_id, query_map, PAGE};
use super::session::{Session, PATH};
use super::view::{badge, layout, page_response, time};
use crate::config::Settings;
use crate::operator::{AuditFilter, AuditRow};
use crate::routes::operator_calls::calls;
use crate::state::AppState;
use actix_web::{web, HttpRequest, HttpResponse};
use maud::{html, Markup};
use std::collections::HashMap;

/// `GET /console/audit`: the audit trail, newest first — who did what, when, from where,
/// and what came of it — filtered by operator, action and outcome.
pub async fn audit(
    session: Session,
    request: HttpRequest,
    state: web::Data<AppState>,
) -> Result<HttpResponse, ConsoleError> {
    let q = query_map(&request);
    let filter = AuditFilter {
        operator: q.get("operator").cloned().filter(|v| !v.is_empty()),
        action: q.get("action").cloned().filter(|v| !v.is_empty()),
        outcome: q.get("outcome").cloned().filter(|v| !v.is_empty()),
        ..AuditFilter::default()
    };
    let before = parse_id(q.get("before"))?;
    let settings = state.settings.current();
    let page = calls(&state, &settings)
        .audit_trail(filter, before, Some(PAGE))
        .await?;
    let older = page
        .next_cursor
        .as_deref()
        .and_then(|c| c.parse::<i64>().ok());
    let body = html! {
        (audit_filters(&q, &settings))
        (audit_table(&page.rows))
        @if let Some(older) = older {
            p.pager { a href=(pager_href("/audit", &q, older, None)) { "Older →" } }
        }
    };
    Ok(page_response(
        200,
        layout(Some(&session), "/audit", "Audit trail", body),
    ))
}

fn audit_filters(q: &HashMap<String, String>, settings: &Settings) -> Markup {
    let value = |name: &str| q.get(name).cloned().unwrap_or_default();
    let names: Vec<&str> = settings
        .operator
        .accounts
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    let actions = [
        "replay",
        "requeue",
        "discard",
        "reload",
        "sign_in",
        "sign_out",
        "clear_hook_secret",
    ];
    html! {
        form.filters method="get" action={ (PATH) "/audit" } {
            (choice("Operator", "operator", &value("operator"), &names))
            (choice("Action", "action", &value("action"), &actions))
            (choice("Outcome", "outcome", &value("outcome"), &["done", "refused", "failed"]))
            button type="submit" { "Filter" }
        }
    }
}

fn audit_table(rows: &[AuditRow]) -> Markup {
    html! {
        @if rows.is_empty() {
            p.empty { "No operator action recorded." }
        } @else {
            div.scroll { table.audit {
                thead { tr {
                    th { "When" } th { "Operator" } th { "Action" } th { "Outcome" }
                    th { "Result" } th { "Parameters" } th { "From" } th { "Key · request" }
                } }
                tbody {
                    @for row in rows {
                        tr {
                            td { (time(row.at)) }
                            td { (row.operator) " " small.muted { (row.role) } }
                            td { (row.action) " " small.muted { (row.surface) } }
                            td { (badge(&row.outcome)) }
                            td { (row.result) }
                            td.id { code { (row.parameters) } }
                            td { (row.client.as_deref().unwrap_or("—")) }
                            td.id {
                                (row.idempotency_key.as_deref().unwrap_or("—"))
                                br;
                                small.muted { (row.request_id.as_deref().unwrap_or("—")) }
                            }
                        }
                    }
                }
            } }
        }
    }
}
