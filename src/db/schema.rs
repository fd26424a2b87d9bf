//! The tables, in portable types shared by SQLite and PostgreSQL. Operators query these
//! tables directly: their names and columns are part of the contract.

diesel::table! {
    /// The inbox and dedupe record. Expires after `retention.events`.
    events (id) {
        id -> BigInt,
        source -> Text,
        event_id -> Text,
        event_type -> Nullable<Text>,
        fingerprint -> Text,
        status -> Text,
        fact_kind -> Text,
        fact_key -> Text,
        payload -> Binary,
        response_status -> Nullable<Integer>,
        response_content_type -> Nullable<Text>,
        response_body -> Nullable<Binary>,
        received_at -> Timestamp,
        expires_at -> Timestamp,
        content_type -> Nullable<Text>,
        headers -> Nullable<Text>,
        /// The W3C `traceparent` of the span that received it (tracing on).
        trace_parent -> Nullable<Text>,
        /// How it arrived: NULL for a webhook, `recovered` from its provider's record.
        arrival -> Nullable<Text>,
    }
}

diesel::table! {
    /// The ledger of facts. Permanent: never swept.
    facts (id) {
        id -> BigInt,
        source -> Text,
        kind -> Text,
        fact_key -> Text,
        first_event_id -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    /// The outbox: one row per new fact and destination.
    deliveries (id) {
        id -> BigInt,
        source -> Text,
        event_id -> Text,
        event_type -> Nullable<Text>,
        destination -> Text,
        /// NULL while the event's row holds the bytes (the sweeper copies them here first).
        payload -> Nullable<Binary>,
        content_type -> Text,
        status -> Text,
        attempt -> Integer,
        locked_until -> Nullable<Timestamp>,
        next_attempt_at -> Timestamp,
        deadline_at -> Timestamp,
        created_at -> Timestamp,
        delivered_at -> Nullable<Timestamp>,
        last_status -> Nullable<Integer>,
        last_error -> Nullable<Text>,
        settled_at -> Nullable<Timestamp>,
        /// Its event's `traceparent`: each attempt's span continues that trace.
        trace_parent -> Nullable<Text>,
        /// Its destination's filter could not decide when it was enqueued: evaluated again
        /// when it is leased.
        filter_pending -> Bool,
        /// Leases that sent nothing and gave the row back for later: they spend none of
        /// `max_attempts` (which counts `attempt - parked`).
        parked -> Integer,
    }
}
diesel::table! {
    /// The operator API's Idempotency-Key store.
    operator_requests (id) {
        id -> BigInt,
        caller -> Text,
        idempotency_key -> Text,
        fingerprint -> Text,
        status -> Text,
        response_status -> Nullable<Integer>,
        response_body -> Nullable<Binary>,
        created_at -> Timestamp,
        expires_at -> Timestamp,
    }
}

diesel::table! {
    /// One row per attempt at a delivery, written with its settlement.
    delivery_attempts (id) {
        id -> BigInt,
        delivery_id -> BigInt,
        attempt -> Integer,
        outcome -> Text,
        status -> Nullable<Integer>,
        error -> Nullable<Text>,
        started_at -> Timestamp,
        duration_ms -> BigInt,
    }
}

diesel::table! {
    /// Each destination's circuit breaker and rate-limit bucket, shared by every instance.
    destination_gates (source, destination) {
        source -> Text,
        destination -> Text,
        failures -> Integer,
        open_until -> Nullable<Timestamp>,
        cooldown_ms -> BigInt,
        opened_at -> Nullable<Timestamp>,
        tokens -> Double,
        tokens_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    /// Console sessions: one row per sign-in, closed at sign-out, deleted once expired.
    console_sessions (id) {
        id -> Text,
        created_at -> Timestamp,
        expires_at -> Timestamp,
        revoked_at -> Nullable<Timestamp>,
        /// Who signed in (NULL for rows older than the column).
        operator -> Nullable<Text>,
    }
}

diesel::table! {
    /// The audit trail of operator actions. Swept after `retention.audit`; never by an API.
    audit (id) {
        id -> BigInt,
        at -> Timestamp,
        operator -> Text,
        role -> Text,
        action -> Text,
        outcome -> Text,
        parameters -> Text,
        result -> Text,
        idempotency_key -> Nullable<Text>,
        request_id -> Nullable<Text>,
        client -> Nullable<Text>,
        surface -> Text,
    }
}

diesel::table! {
    /// Secrets generated once and shared by every instance (the console's session key).
    server_secrets (name) {
        name -> Text,
        value -> Text,
        created_at -> Timestamp,
    }
}

diesel::table! {
    /// Secrets established by a provider's handshake (Asana's `X-Hook-Secret`), one per
    /// source, shared by every instance; removed only by an operator. Never shown.
    hook_secrets (source) {
        source -> Text,
        secret -> Text,
        established_at -> Timestamp,
    }
}

diesel::table! {
    /// Bulk operator actions by filter, worked through in batches (see `operator::bulk`).
    bulk_actions (id) {
        id -> BigInt,
        action -> Text,
        filter -> Text,
        operator -> Text,
        status -> Text,
        upper_id -> BigInt,
        cursor_id -> BigInt,
        matched -> BigInt,
        processed -> BigInt,
        results -> Text,
        error -> Nullable<Text>,
        failures -> Integer,
        lease_holder -> Nullable<Text>,
        locked_until -> Nullable<Timestamp>,
        created_at -> Timestamp,
        updated_at -> Timestamp,
        finished_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    /// Reconciliation runs (see `reconcile`): requested, running, ok or failed.
    reconcile_runs (id) {
        id -> BigInt,
        source -> Text,
        trigger -> Text,
        mode -> Text,
        status -> Text,
        window_from -> Timestamp,
        window_to -> Timestamp,
        cursor -> Nullable<Text>,
        listed -> BigInt,
        missing -> BigInt,
        recovered -> BigInt,
        errors -> BigInt,
        missing_ids -> Text,
        error -> Nullable<Text>,
        requested_by -> Nullable<Text>,
        started_at -> Timestamp,
        finished_at -> Nullable<Timestamp>,
    }
}

diesel::table! {
    /// Each reconciled source's run lease and where its next scheduled run starts.
    reconcile_sources (source) {
        source -> Text,
        lease_holder -> Nullable<Text>,
        locked_until -> Nullable<Timestamp>,
        checked_until -> Nullable<Timestamp>,
        last_success_at -> Nullable<Timestamp>,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    events,
    facts,
    deliveries,
    operator_requests,
    delivery_attempts,
    destination_gates,
    console_sessions,
    audit,
    server_secrets,
    hook_secrets,
    bulk_actions,
    reconcile_runs,
    reconcile_sources
);
