//! The evaluator against jq's semantics and its bounds (no database: these are jaq's
//! answers and Inlet's guards around them).

use super::*;
use std::time::Instant;

fn input(payload: &str) -> Input {
    Input {
        payload: bytes::Bytes::from(payload.to_owned()),
        headers: vec![
            ("x-github-event".to_owned(), "push".to_owned()),
            ("x-forwarded-for".to_owned(), "10.0.0.1".to_owned()),
            ("x-forwarded-for".to_owned(), "10.0.0.2".to_owned()),
        ],
        event_type: Some("push".to_owned()),
        source: "github".to_owned(),
        event_id: "evt_1".to_owned(),
    }
}

fn decide_on(expression: &str, payload: &str) -> Decision {
    let program = compile(expression).expect("compiles");
    decide_blocking(&program, input(payload), &Limits::default())
}

fn transform_of(expression: &str, payload: &str) -> Result<String, EvalError> {
    let program = compile(expression).expect("compiles");
    transform_blocking(&program, input(payload), &Limits::default())
        .map(|body| String::from_utf8(body).expect("UTF-8"))
}

#[test]
fn a_filter_decides_on_the_payload_and_the_variables() {
    let stripe = r#"{"data":{"object":{"amount":150000,"currency":"eur"}}}"#;
    let big = ".data.object.amount > 100000 and .data.object.currency == \"eur\"";
    assert_eq!(decide_on(big, stripe), Ok(true));
    assert_eq!(decide_on(".data.object.amount > 200000", stripe), Ok(false));
    assert_eq!(
        decide_on("$type == \"push\" and $source == \"github\"", "{}"),
        Ok(true)
    );
    assert_eq!(decide_on("$event_id == \"evt_1\"", "{}"), Ok(true));
    assert_eq!(
        decide_on("$headers[\"x-github-event\"] == \"push\"", "{}"),
        Ok(true)
    );
    assert_eq!(
        decide_on(
            "$headers[\"x-forwarded-for\"] == \"10.0.0.1, 10.0.0.2\"",
            "{}"
        ),
        Ok(true)
    );
    // null, false and no output do not take the event; other values are errors.
    assert_eq!(decide_on(".missing", "{}"), Ok(false));
    assert_eq!(decide_on("empty", "{}"), Ok(false));
    assert!(
        matches!(decide_on(".a", r#"{"a":1}"#), Err(EvalError::Expression(m)) if m.contains("a number"))
    );
    assert!(
        matches!(decide_on("true, true", "{}"), Err(EvalError::Expression(m)) if m.contains("several"))
    );
    assert!(matches!(
        decide_on(".a | tonumber", r#"{"a":"x"}"#),
        Err(EvalError::Expression(_))
    ));
    assert_eq!(decide_on("true", "not json"), Err(EvalError::NotJson));
    assert_eq!(decide_on("true", "{} {}"), Err(EvalError::NotJson));
}

#[test]
fn a_transform_outputs_compact_json() {
    let body = transform_of(
        "{id: .id, amount: .data.object.amount, type: $type}",
        r#"{ "id": "evt_1", "data": {"object": {"amount": 1200}} }"#,
    );
    assert_eq!(
        body,
        Ok(r#"{"id":"evt_1","amount":1200,"type":"push"}"#.to_owned())
    );
    assert!(
        matches!(transform_of("empty", "{}"), Err(EvalError::Expression(m)) if m.contains("none"))
    );
    assert!(
        matches!(transform_of("1, 2", "{}"), Err(EvalError::Expression(m)) if m.contains("several"))
    );
    let limits = Limits {
        output: 10,
        ..Limits::default()
    };
    let program = compile("\"a long string of text\"").expect("compiles");
    let large = transform_blocking(&program, input("{}"), &limits);
    assert_eq!(large, Err(EvalError::TooLarge(23, 10)));
}

#[test]
fn errors_name_line_and_column() {
    let error = compile(".a |\n  map(.b").expect_err("unclosed");
    assert_eq!(error.line, 2, "{error}");
    let error = compile(".a | nosuchfunction(1)").expect_err("undefined");
    assert_eq!((error.line, error.column), (1, 6), "{error}");
    assert!(error.message.contains("nosuchfunction"), "{error}");
    let error = compile("$nosuchvar").expect_err("undefined variable");
    assert!(error.message.contains("$nosuchvar"), "{error}");
    let error = compile("include \"x\"; .").expect_err("no modules");
    assert!(error.message.contains("modules"), "{error}");
}

#[test]
fn expressions_that_can_only_error_are_refused() {
    for text in ["error", "error(\"no\")", "1 + \"a\"", "\"a\" - 1"] {
        let error = compile(text).expect_err(text);
        assert!(
            error.message.starts_with("can only ever error"),
            "{text}: {error}"
        );
    }
    // Reading the input, they may well succeed on some events.
    for text in [
        ".a | tonumber",
        "$type | test(\"x\")",
        "\"a.b\" | error(.) | not",
    ] {
        let refused = compile(text).err();
        assert!(
            refused.is_none() || text.contains("error(.)"),
            "{text}: {refused:?}"
        );
    }
    assert!(
        compile("false").is_ok(),
        "a constant false pauses a destination"
    );
}

#[test]
fn the_servers_environment_and_streams_are_out_of_reach() {
    for text in [
        "env",
        "$ENV",
        "halt",
        "halt_error",
        "debug",
        "stderr",
        "input",
        "inputs",
    ] {
        assert!(compile(text).is_err(), "{text} compiles");
    }
}

#[test]
fn runaway_expressions_are_bounded() {
    let limits = Limits::default();
    for (text, bounds) in [
        (
            "[limit(1e9; repeat(.))] | length > 0",
            &["steps", "time", "memory"][..],
        ),
        ("[range(1e9)] | length > 0", &["steps", "time", "memory"]),
        ("def f: 1 + f; f > 0", &["steps", "depth", "time"]),
        ("def f: f; f", &["steps", "time"]),
        (
            "reduce range(40) as $i (\"x\"; . + .) | length > 0",
            &["memory"],
        ),
        ("last(range(1e12)) > 0", &["steps", "time"]),
    ] {
        let program = compile(text).expect(text);
        let started = Instant::now();
        let decision = decide_blocking(&program, input("{}"), &limits);
        match decision {
            Err(EvalError::Exhausted(bound)) => assert!(bounds.contains(&bound), "{text}: {bound}"),
            other => panic!("{text}: {other:?}"),
        }
        // Not a timing claim: a bound that did not hold would take minutes, not seconds.
        assert!(started.elapsed().as_secs() < 30, "{text}");
    }
    assert_eq!(decide_on("[range(5)] == [0,1,2,3,4]", "{}"), Ok(true));
    assert_eq!(
        decide_on("[range(10; 0; -3)] == [10,7,4,1]", "{}"),
        Ok(true)
    );
    assert_eq!(
        decide_on("[range(0; 1; 0.25)] | length == 4", "{}"),
        Ok(true)
    );
}

#[test]
fn twenty_evaluations_at_once_each_get_their_own_answer() {
    let program = compile(".n % 2 == 0").expect("compiles");
    let threads: Vec<_> = (0..24)
        .map(|n| {
            let program = program.clone();
            std::thread::spawn(move || {
                let decision = decide_blocking(
                    &program,
                    input(&format!("{{\"n\":{n}}}")),
                    &Limits::default(),
                );
                (n, decision)
            })
        })
        .collect();
    for thread in threads {
        let (n, decision) = thread.join().expect("joins");
        assert_eq!(decision, Ok(n % 2 == 0), "{n}");
    }
}

#[test]
fn the_books_error_messages_are_the_ones_given() {
    let undefined = compile(".a | startwith(\"x\")").expect_err("undefined");
    assert_eq!(
        undefined.to_string(),
        "line 1, column 6: undefined filter 'startwith/1'"
    );
    let unfinished = compile(".a |\n").expect_err("unfinished");
    assert_eq!(
        unfinished.to_string(),
        "line 2, column 1: expected term, found the end"
    );
}
