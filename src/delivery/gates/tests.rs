use super::*;

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(1_700_000_000_000 + ms).expect("valid")
}

fn breaker(failures: u32) -> BreakerSettings {
    BreakerSettings {
        failures,
        cooldown: Duration::from_secs(30),
        cooldown_cap: Duration::from_secs(100),
    }
}

fn closed() -> Gate {
    Gate::default()
}

fn settings(breaker_failures: u32) -> GateSettings {
    GateSettings {
        breaker: breaker(breaker_failures),
        max_in_flight: None,
        rate: None,
    }
}

use Health::{Answered, Failed};

#[test]
fn the_breaker_opens_after_the_configured_consecutive_failures() {
    let mut gate = closed();
    assert!(observe(&mut gate, &[Failed, Failed], &breaker(3), at(0)).is_empty());
    // An answer in between starts the count again.
    assert!(observe(&mut gate, &[Answered, Failed, Failed], &breaker(3), at(0)).is_empty());
    assert_eq!(gate.breaker(at(0)), BreakerState::Closed);
    let opened = observe(&mut gate, &[Failed], &breaker(3), at(0));
    assert_eq!(opened, vec![Transition::Opened]);
    assert_eq!(gate.breaker(at(29_999)), BreakerState::Open);
    assert_eq!(gate.breaker(at(30_000)), BreakerState::HalfOpen);
    // Sends leased before it opened neither extend nor reopen it.
    assert!(observe(&mut gate, &[Failed, Failed], &breaker(3), at(10)).is_empty());
    assert_eq!(gate.open_until, Some(at(30_000).naive_utc()));
}

#[test]
fn a_failed_probe_doubles_the_cooldown_up_to_the_cap_and_an_answer_closes() {
    let mut gate = closed();
    observe(&mut gate, &[Failed], &breaker(1), at(0));
    assert_eq!(gate.cooldown_ms, 30_000);
    let mut now = 30_000;
    for expected in [60_000, 100_000, 100_000] {
        let reopened = observe(&mut gate, &[Failed], &breaker(1), at(now));
        assert_eq!(reopened, vec![Transition::Reopened]);
        assert_eq!(gate.cooldown_ms, expected);
        now += expected;
        assert_eq!(gate.breaker(at(now - 1)), BreakerState::Open);
        assert_eq!(gate.breaker(at(now)), BreakerState::HalfOpen);
    }
    let closed_now = observe(&mut gate, &[Answered], &breaker(1), at(now));
    assert_eq!(closed_now, vec![Transition::Closed]);
    assert_eq!((gate.failures, gate.cooldown_ms), (0, 0));
    assert_eq!(gate.breaker(at(now)), BreakerState::Closed);
    // The next opening starts from the first cool-down again.
    observe(&mut gate, &[Failed], &breaker(1), at(now));
    assert_eq!(gate.cooldown_ms, 30_000);
}

#[test]
fn a_breaker_turned_off_counts_but_never_opens() {
    let mut gate = closed();
    assert!(observe(&mut gate, &[Failed; 50], &breaker(0), at(0)).is_empty());
    assert_eq!(gate.failures, 50);
    assert_eq!(allowance(&gate, &settings(0), 0, at(0)), Allowance::Any);
}

#[test]
fn an_open_breaker_lets_nothing_through_and_a_half_open_one_a_single_probe() {
    let mut gate = closed();
    observe(&mut gate, &[Failed], &breaker(1), at(0));
    assert_eq!(allowance(&gate, &settings(1), 0, at(1)), Allowance::UpTo(0));
    assert_eq!(
        ready_in(&gate, &settings(1), at(1)),
        Some(Duration::from_millis(29_999))
    );
    assert_eq!(
        allowance(&gate, &settings(1), 0, at(30_000)),
        Allowance::UpTo(1)
    );
    // A probe (or an older send) is still out: no second one.
    assert_eq!(
        allowance(&gate, &settings(1), 1, at(30_000)),
        Allowance::UpTo(0)
    );
    // Turned off by configuration: the stored state no longer holds anything.
    assert_eq!(allowance(&gate, &settings(0), 0, at(1)), Allowance::Any);
}

#[test]
fn max_in_flight_leaves_room_for_what_is_already_out() {
    let limited = GateSettings {
        max_in_flight: Some(5),
        ..settings(0)
    };
    assert_eq!(allowance(&closed(), &limited, 0, at(0)), Allowance::UpTo(5));
    assert_eq!(allowance(&closed(), &limited, 3, at(0)), Allowance::UpTo(2));
    assert_eq!(allowance(&closed(), &limited, 9, at(0)), Allowance::UpTo(0));
}

#[test]
fn the_bucket_starts_full_refills_at_the_rate_and_keeps_fractions() {
    let rate = RateLimit {
        per_second: 4.0,
        burst: 8,
    };
    let limited = GateSettings {
        rate: Some(rate),
        ..settings(0)
    };
    let mut gate = closed();
    assert_eq!(allowance(&gate, &limited, 0, at(0)), Allowance::UpTo(8));
    spend(&mut gate, &rate, 8, at(0));
    assert_eq!(allowance(&gate, &limited, 0, at(0)), Allowance::UpTo(0));
    assert_eq!(
        ready_in(&gate, &limited, at(0)),
        Some(Duration::from_millis(250))
    );
    // 1.5 s later: 6 tokens.
    assert_eq!(allowance(&gate, &limited, 0, at(1_500)), Allowance::UpTo(6));
    spend(&mut gate, &rate, 5, at(1_500));
    // The fraction left over counts: 1 + 0.125·4 = 1.5 → one.
    assert_eq!(allowance(&gate, &limited, 0, at(1_625)), Allowance::UpTo(1));
    // A long quiet spell fills the bucket to its burst, no further.
    assert_eq!(
        allowance(&gate, &limited, 0, at(3_600_000)),
        Allowance::UpTo(8)
    );
}

#[test]
fn the_tightest_gate_wins() {
    let both = GateSettings {
        max_in_flight: Some(3),
        rate: Some(RateLimit {
            per_second: 10.0,
            burst: 10,
        }),
        ..settings(5)
    };
    assert_eq!(allowance(&closed(), &both, 1, at(0)), Allowance::UpTo(2));
    let mut gate = closed();
    spend(&mut gate, &both.rate.expect("rate"), 9, at(0));
    assert_eq!(allowance(&gate, &both, 0, at(0)), Allowance::UpTo(1));
}

fn parse(
    breaker: Option<BreakerFile>,
    max_in_flight: Option<u32>,
    rate: Option<f64>,
    rate_burst: Option<u32>,
) -> Result<GateSettings, ConfigError> {
    let key = |field: &str| format!("d.{field}");
    GateSettings::validate(&key, breaker, max_in_flight, rate, rate_burst)
}

#[test]
fn defaults_and_refusals_name_the_key() {
    let defaults = parse(None, None, None, None).expect("defaults");
    assert_eq!(defaults.breaker.failures, DEFAULT_BREAKER_FAILURES);
    assert!(!defaults.limits() && defaults.any());
    let rate = parse(None, None, Some(2.5), None).expect("rate");
    assert_eq!(rate.rate.map(|r| r.burst), Some(3));
    for (result, key) in [
        (parse(None, Some(0), None, None), "d.max_in_flight"),
        (parse(None, None, Some(0.0), None), "d.rate"),
        (parse(None, None, Some(f64::NAN), None), "d.rate"),
        (parse(None, None, None, Some(5)), "d.rate_burst"),
        (parse(None, None, Some(1.0), Some(0)), "d.rate_burst"),
        (
            parse(
                Some(BreakerFile {
                    cooldown: Some("0s".into()),
                    ..Default::default()
                }),
                None,
                None,
                None,
            ),
            "d.breaker.cooldown",
        ),
        (
            parse(
                Some(BreakerFile {
                    cooldown: Some("5m".into()),
                    cooldown_cap: Some("1m".into()),
                    ..Default::default()
                }),
                None,
                None,
                None,
            ),
            "d.breaker.cooldown_cap",
        ),
    ] {
        assert_eq!(result.expect_err(key).key, key);
    }
}

#[test]
fn observations_group_by_destination_in_order() {
    let key = |d: &str| crate::delivery::DestinationKey::stored("s".to_owned(), d.to_owned());
    let o = |d: &str, health| Observation {
        key: key(d),
        breaker: breaker(1),
        health,
    };
    let grouped = by_destination([o("a", Failed), o("b", Answered), o("a", Answered)]);
    assert_eq!(grouped.len(), 2);
    assert_eq!(grouped[0].key, key("a"));
    assert_eq!(grouped[0].healths, vec![Failed, Answered]);
    assert_eq!(grouped[1].healths, vec![Answered]);
}
