//! Three `inlet serve` processes on one PostgreSQL database, every event sent to all
//! three at the same moment, and some payments sent at the same moment under a second
//! event id: one event row per event, one fact per fact, one delivery row per fact, every
//! copy answered with the same bytes. Halfway, one of the three is killed (`kill -9`):
//! the deliveries it held are taken over by the others once their lease ends.

use crate::helpers::{Backend, Process};
use crate::support::{
    assert_none, check_invariants, drained, kill_9, knob, load_client, post_stripe, report, seeded,
    serve, stop, stored_and_applied, stripe_body, Answer, Rig, DELIVERY_CONCURRENCY,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

/// Event groups in flight at once; each sends 3 to 5 copies, so 24 to 40 requests.
const GROUPS_AT_ONCE: usize = 8;

/// What a group sends: an event (to every instance, one of them twice), and sometimes the
/// same payment under another event id (to one instance).
struct Group {
    event_id: String,
    body: Vec<u8>,
    regenerated: Option<(String, Vec<u8>)>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "chaos suite: cargo test --test chaos -- --include-ignored"]
async fn three_instances_on_one_postgres_database() {
    let groups = knob("INLET_CHAOS_FANOUT_EVENTS", 1000) as usize;
    let mut rng = seeded("three instances");
    let began = Instant::now();
    let rig = Rig::fresh(Backend::Postgres, "fanout", 0.05).await;
    let mut instances: Vec<Option<Process>> = Vec::new();
    for _ in 0..3 {
        instances.push(Some(serve(&rig.config).await));
    }
    let mut ports: Vec<u16> = instances.iter().flatten().map(|p| p.port).collect();

    let plan: Vec<Group> = (0..groups)
        .map(|n| {
            let event_id = format!("evt_fan_{n}");
            let object = format!("pi_fan_{n}");
            let regenerated = rng.f64() < 0.3;
            let event_type = if regenerated || rng.bool() {
                "payment_intent.succeeded"
            } else {
                "charge.captured"
            };
            Group {
                body: stripe_body(&event_id, event_type, &object),
                regenerated: regenerated.then(|| {
                    let id = format!("evt_fan_{n}_regenerated");
                    let body = stripe_body(&id, "payment_intent.succeeded", &object);
                    (id, body)
                }),
                event_id,
            }
        })
        .collect();

    let client = load_client();
    let mut answers: HashMap<String, Vec<Answer>> = HashMap::new();
    let mut conflicts = 0u64;
    let mut failures = Vec::new();
    let mut killed = None;
    for (batch_number, batch) in plan.chunks(GROUPS_AT_ONCE).enumerate() {
        if killed.is_none() && batch_number * GROUPS_AT_ONCE >= groups / 2 {
            // Halfway: one instance dies with deliveries in flight.
            let victim = rng.usize(..3);
            let process = instances[victim].take().expect("a running instance");
            kill_9(process).await;
            ports.remove(victim);
            killed = Some(victim);
        }
        let mut requests = tokio::task::JoinSet::new();
        for group in batch {
            // Every live instance gets the event, one of them a second copy.
            let mut targets = ports.clone();
            targets.push(ports[rng.usize(..ports.len())]);
            for port in targets {
                let (client, id, body) =
                    (client.clone(), group.event_id.clone(), group.body.clone());
                requests.spawn(async move { (id, send_until_decided(&client, port, &body).await) });
            }
            if let Some((id, body)) = &group.regenerated {
                let port = ports[rng.usize(..ports.len())];
                let (client, id, body) = (client.clone(), id.clone(), body.clone());
                requests.spawn(async move { (id, send_until_decided(&client, port, &body).await) });
            }
        }
        while let Some(done) = requests.join_next().await {
            let (id, (answer, retried)) = done.expect("a request");
            conflicts += retried;
            answers.entry(id).or_default().push(answer);
        }
    }

    // Every copy answered 200 with the same bytes, exactly one of them fresh.
    let mut receipts = HashMap::new();
    for (id, copies) in &answers {
        let first = &copies[0];
        if copies
            .iter()
            .any(|a| a.status != 200 || a.body != first.body)
        {
            failures.push(format!(
                "{id}: copies answered differently: {:?}",
                copies
                    .iter()
                    .map(|a| (a.status, String::from_utf8_lossy(&a.body).into_owned()))
                    .collect::<Vec<_>>()
            ));
        }
        let fresh = copies.iter().filter(|a| !a.replayed).count();
        if fresh != 1 {
            failures.push(format!(
                "{id}: {fresh} fresh answers among {} copies",
                copies.len()
            ));
        }
        receipts.insert(id.clone(), first.json());
    }
    // A payment and its regenerated event id: one accepted, the other a known fact.
    let mut outcomes: BTreeMap<String, u64> = BTreeMap::new();
    for group in &plan {
        let outcome = |id: &str| receipts[id]["outcome"].as_str().unwrap_or("-").to_owned();
        *outcomes.entry(outcome(&group.event_id)).or_default() += 1;
        if let Some((other, _)) = &group.regenerated {
            *outcomes.entry(outcome(other)).or_default() += 1;
            let pair: HashSet<String> = [outcome(&group.event_id), outcome(other)].into();
            let expected: HashSet<String> =
                ["accepted".to_owned(), "duplicate_fact".to_owned()].into();
            if pair != expected {
                failures.push(format!("{} and {other}: outcomes {pair:?}", group.event_id));
            }
        }
    }

    let snapshot = drained(&rig.url, Duration::from_secs(60)).await;
    let log = rig.app.log();
    failures.extend(check_invariants(&snapshot, &receipts, &log));
    // Several dispatchers never send one row at once (SKIP LOCKED leases); a second
    // application needs the kill, so at most what the killed instance had in flight.
    if log.applied_more_than_once() > DELIVERY_CONCURRENCY {
        failures.push(format!(
            "{} keys applied more than once, over the {DELIVERY_CONCURRENCY} the killed \
             instance can have had in flight",
            log.applied_more_than_once()
        ));
    }
    let facts_expected = groups;
    if snapshot.events.len() != receipts.len() || snapshot.fact_rows != facts_expected {
        failures.push(format!(
            "{} events and {} facts for {} events and {facts_expected} facts sent",
            snapshot.events.len(),
            snapshot.fact_rows,
            receipts.len()
        ));
    }
    assert_none("three instances", &failures);

    let requests: usize = answers.values().map(Vec::len).sum();
    report(&format!(
        "three instances: {groups} events fanned out to every instance ({} with a \
         regenerated event id for the same payment), {requests} requests, {GROUPS_AT_ONCE} \
         events at a time; instance {} killed (-9) halfway; {:.1} s\n\
         \x20 answers: all 200, copies byte-identical, one fresh answer per event; outcomes \
         {outcomes:?}; {conflicts} answered 409 claim_in_progress and retried\n\
         \x20 {}",
        plan.iter().filter(|g| g.regenerated.is_some()).count(),
        killed.map_or(-1, |k| k as i64 + 1),
        began.elapsed().as_secs_f64(),
        stored_and_applied(&snapshot, &log),
    ));

    for process in instances.into_iter().flatten() {
        stop(process).await;
    }
}

/// Posts until the answer is not a `409 claim_in_progress` (the contract's "retry in a
/// moment"); returns the answer and how many 409s came first.
async fn send_until_decided(client: &reqwest::Client, port: u16, body: &[u8]) -> (Answer, u64) {
    let mut conflicts = 0;
    loop {
        let answer = post_stripe(client, port, body)
            .await
            .expect("a live instance answers");
        if answer.status != 409 || conflicts > 20 {
            return (answer, conflicts);
        }
        conflicts += 1;
        // Real time must pass: "retry in a moment" is what the contract asks of a provider.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
