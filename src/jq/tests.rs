//! The evaluator against jq's semantics and its bounds (no database: these are jaq's
//! answers and Inlet's guards around them). Every evaluation here crosses to a real
//! evaluator process: the `inlet` binary cargo built beside these tests.

use super::*;
use std::time::{Duration, Instant};

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

/// What `text` is refused for (it must be refused for its own fault).
fn refused(text: &str) -> CompileError {
    match compile(text) {
        Err(CheckError::Refused(error)) => error,
        other => panic!("{text}: {other:?}"),
    }
}

fn decide_blocking(program: &Program, input: Input, limits: &Limits) -> Decision {
    let decisions = decide_each_blocking(std::slice::from_ref(program), &input, limits, Lane::Live);
    decisions.into_iter().next().expect("one decision")
}

fn decide_on(expression: &str, payload: &str) -> Decision {
    let program = compile(expression).expect("compiles");
    decide_blocking(&program, input(payload), &Limits::default())
}

fn transform_of(expression: &str, payload: &str) -> Result<String, EvalError> {
    let program = compile(expression).expect("compiles");
    transform_blocking(&program, &input(payload), &Limits::default(), Lane::Live)
        .map(|body| String::from_utf8(body).expect("UTF-8"))
}

fn reached(error: &EvalError) -> Option<&'static str> {
    error.bound().map(Bound::as_str)
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
    let large = transform_blocking(&program, &input("{}"), &limits, Lane::Live);
    assert_eq!(large, Err(EvalError::TooLarge(23, 10)));
}

#[test]
fn errors_name_line_and_column() {
    let error = refused(".a |\n  map(.b");
    assert_eq!(error.line, 2, "{error}");
    let error = refused(".a | nosuchfunction(1)");
    assert_eq!((error.line, error.column), (1, 6), "{error}");
    assert!(error.message.contains("nosuchfunction"), "{error}");
    let error = refused("$nosuchvar");
    assert!(error.message.contains("$nosuchvar"), "{error}");
    let error = refused("include \"x\"; .");
    assert!(error.message.contains("modules"), "{error}");
}

#[test]
fn expressions_that_can_only_error_are_refused() {
    for text in ["error", "error(\"no\")", "1 + \"a\"", "\"a\" - 1"] {
        let error = refused(text);
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
        match decision.as_ref().map_err(reached) {
            Err(Some(bound)) => assert!(bounds.contains(&bound), "{text}: {bound}"),
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

/// One job on `pool`: each program's result (a transform's as its body's length), or the
/// error of the job.
fn on_pool(
    pool: &pool::Pool,
    limits: &Limits,
    task: Task,
    text: &str,
    payload: &str,
) -> Result<Output, EvalError> {
    let job = job(task, vec![text.to_owned()], &Input::default(), limits);
    let (answer, _) = run_on(pool, limits, &job, payload.as_bytes())?;
    answer.results.into_iter().next().expect("one result")
}

/// Which limits a bound's case runs under: the test's own, but for the one it drives.
#[derive(Clone, Copy)]
enum Under {
    /// 32 MiB, 200 ms, steps without end.
    Base,
    /// 100,000 steps.
    Steps,
    /// 20 ms.
    Time,
    /// 20 s: the stack is what runs out.
    Deep,
}

impl Under {
    fn limits(self) -> Limits {
        let base = Limits {
            time: Duration::from_millis(200),
            steps: 100_000_000,
            memory: 32 << 20,
            output: 1 << 20,
            ..Limits::default()
        };
        match self {
            Under::Base => base,
            Under::Steps => Limits {
                steps: 100_000,
                ..base
            },
            Under::Time => Limits {
                time: Duration::from_millis(20),
                ..base
            },
            Under::Deep => Limits {
                time: Duration::from_secs(20),
                ..base
            },
        }
    }
}

/// Each bound from an expression, then from a payload meeting an ordinary-looking one.
#[rustfmt::skip]
const BOUNDS: [(Bound, Under, Task, &str, &str); 12] = [
    (Bound::Memory, Under::Base, Task::Decide, r#"("x" * 1000000000000) | length > 0"#, "{}"),
    (Bound::Memory, Under::Base, Task::Decide, r#"("*" * (.rating // 0)) | length >= 4"#, r#"{"rating":1000000000000}"#),
    (Bound::Memory, Under::Base, Task::Decide, r#"reduce range(40) as $i ("x"; . + .) | length > 0"#, "{}"),
    (Bound::Memory, Under::Base, Task::Decide, r#"reduce range(.n) as $i (.s; . + .) | length > 0"#, r#"{"s":"ab","n":40}"#),
    (Bound::Steps, Under::Steps, Task::Decide, "[range(1e9)] | length > 0", "{}"),
    (Bound::Steps, Under::Steps, Task::Decide, "[range(.n)] | length > 0", r#"{"n":1e9}"#),
    (Bound::Time, Under::Time, Task::Decide, "last(range(1e12)) > 0", "{}"),
    (Bound::Time, Under::Time, Task::Decide, "last(range(.n)) > 0", r#"{"n":1e12}"#),
    (Bound::Depth, Under::Deep, Task::Decide, "def f: 1 + f; f > 0", "{}"),
    (Bound::Depth, Under::Deep, Task::Decide, "def f(n): if n > 0 then 1 + f(n - 1) else 0 end; f(.n) > 0", r#"{"n":1e9}"#),
    (Bound::Output, Under::Base, Task::Transform, r#""x" * 2000000"#, "{}"),
    (Bound::Output, Under::Base, Task::Transform, "tostring * .n", r#"{"n":200000}"#),
];

/// Each bound, reached from an expression and from a payload meeting an ordinary-looking
/// expression, is answered as that bound — the evaluator's process, not this one, takes
/// the blow — and the memory the evaluator was resident with, read from its answers and
/// from the kernel for the processes that died, stays within what the bounds allow.
#[test]
fn every_bound_holds_from_an_expression_and_from_a_payload_and_the_memory_is_measured() {
    let limits = Under::Base.limits();
    let pool = pool::Pool::new(Lane::Live, worker_program(), 1);
    let fresh = on_pool(&pool, &limits, Task::Decide, "true", "{}");
    assert_eq!(fresh, Ok(Output::Decision(true)));
    let baseline = pool.peak_rss();
    assert!(baseline > 0, "/proc tells the evaluator's size");
    for (bound, under, task, text, payload) in BOUNDS {
        let result = on_pool(&pool, &under.limits(), task, text, payload);
        let reached = result.as_ref().err().and_then(EvalError::bound);
        assert_eq!(reached, Some(bound), "{text} on {payload}: {result:?}");
        // The next job gets a working evaluator, whatever became of this one.
        assert_eq!(
            on_pool(&pool, &limits, Task::Decide, ".a == 1", r#"{"a":1}"#),
            Ok(Output::Decision(true)),
            "after {text}"
        );
    }
    // Heap within its bound plus the allocator's headroom, stack within as much again.
    let allowed = baseline + 2 * limits.memory as u64 + worker::HEADROOM as u64;
    let peak = pool.peak_rss();
    eprintln!("evaluator resident: fresh {baseline}, peak {peak}, allowed {allowed}");
    assert!(
        peak > baseline,
        "the memory cases made the evaluator grow: {peak}"
    );
    assert!(peak <= allowed, "resident peak {peak} over {allowed}");
}

/// A built-in that runs long between two of the meter's steps is ended by its process's
/// clock: the time bound, and a fresh evaluator after it.
#[test]
fn a_built_in_that_never_steps_is_ended_by_the_clock_outside_it() {
    let limits = Limits {
        time: Duration::from_millis(20),
        steps: 100_000_000,
        memory: 512 << 20,
        ..Limits::default()
    };
    let pool = pool::Pool::new(Lane::Live, worker_program(), 1);
    let text = r#"(.s * .n) | test("(a|b)*c")"#;
    let result = on_pool(
        &pool,
        &limits,
        Task::Decide,
        text,
        r#"{"s":"ab","n":100000000}"#,
    );
    assert_eq!(
        result.as_ref().err().and_then(EvalError::bound),
        Some(Bound::Time),
        "{result:?}"
    );
    assert_eq!(
        on_pool(&pool, &limits, Task::Decide, "true", "{}"),
        Ok(Output::Decision(true))
    );
}

/// jaq's parser recurses as deep as an expression nests: what would overflow a stack
/// overflows an evaluator's, and the expression is refused; this process lives on.
#[test]
fn an_expression_too_deep_for_the_compiler_is_refused_and_this_process_lives() {
    let deep = format!("{}1{}", "[".repeat(32_000), "]".repeat(32_000));
    let error = refused(&deep);
    assert_eq!(error.message, "too deeply nested to compile", "{error}");
    let long = ".".repeat(MAX_EXPRESSION_BYTES + 1);
    assert!(refused(&long).message.starts_with("longer than"));
    assert_eq!(decide_on("[[[1]]] | length == 1", "{}"), Ok(true));
}
