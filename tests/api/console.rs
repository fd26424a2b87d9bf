//! The operator console in a real headless browser: Chromium driven through
//! chromedriver (Debian's `chromium` and `chromium-driver`, which `.ci/run` installs) with
//! fantoccini, against a real Inlet on each backend. Screenshots of the main pages land in
//! `target/console-screenshots/`.

use crate::helpers::{
    application_answering, eventually, eventually_within, first_within, gate, nothing_left_to_send,
    requests_per_key, spawn_app_with, stripe_event, Backend, TestApp, TestOptions, OPERATOR_TOKEN,
};
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use wiremock::MockServer;

crate::on_both_backends!(
    an_operator_signs_in_finds_an_event_and_signs_out,
    a_payload_with_a_script_renders_as_text_and_runs_nothing,
    a_dead_letter_is_requeued_once_however_often_the_form_is_sent,
    a_replay_is_previewed_then_confirmed,
    forms_without_the_csrf_token_and_pages_without_a_session_are_refused,
    an_open_breaker_stands_out_on_the_sources_page_and_the_overview,
    the_event_page_shows_filters_and_tries_an_expression,
    on_call_finds_an_event_by_its_payload_and_sees_why_it_failed,
    a_bulk_requeue_of_500_is_previewed_confirmed_once_and_survives_a_restart,
    the_sources_page_says_when_a_handshake_secret_was_established_never_what,
);

/// With tracing on, the event page shows the webhook's trace id: what to paste into the
/// tracing backend.
#[tokio::test]
async fn the_event_page_shows_the_webhooks_trace_id() {
    let receiver = crate::helpers::OtlpReceiver::start().await;
    let server = application_answering(200).await;
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nname = \"app\"",
            server.uri()
        )),
        telemetry: Some(receiver.telemetry(1.0)),
        ..Default::default()
    };
    let app = spawn_app_with(Backend::Sqlite, options).await;
    let trace = "6bf92f3577b34da6a3ce929d0e0e4736";
    let body = stripe_event("evt_console_traced", "charge.succeeded", "ch_traced");
    let signature = crate::helpers::stripe_signature(
        crate::helpers::STRIPE_SECRET,
        &body,
        app.now().timestamp(),
    );
    let headers = [
        ("Stripe-Signature", signature),
        ("traceparent", format!("00-{trace}-00f067aa0ba902b7-01")),
    ];
    app.post_webhook("stripe", &body, &headers)
        .await
        .assert_status(200);
    let browser = Browser::open(&app).await;
    browser.visit("/console/login").await;
    browser.sign_in(OPERATOR_TOKEN).await;
    browser
        .visit("/console/events/stripe/evt_console_traced")
        .await;
    let facts = browser.text("dl.facts").await;
    assert!(facts.contains(&format!("Trace id\n{trace}")), "{facts}");
    browser.close().await;
}

/// The console follows a dark system setting (Chromium told to prefer the dark scheme).
#[tokio::test]
async fn a_dark_system_setting_gets_the_dark_scheme() {
    let app = spawn_app_with(Backend::Sqlite, TestOptions::default()).await;
    for (args, dark) in [
        (&["--blink-settings=preferredColorScheme=0"][..], true),
        (&[][..], false),
    ] {
        let browser = Browser::open_with(&app, args).await;
        browser.visit("/console/login").await;
        let seen = browser
            .client
            .execute(
                "return [matchMedia('(prefers-color-scheme: dark)').matches,
                         getComputedStyle(document.body).backgroundColor];",
                vec![],
            )
            .await
            .expect("read the page's colours");
        assert_eq!(seen[0], json!(dark), "{seen}");
        let background = if dark {
            "rgb(17, 21, 27)"
        } else {
            "rgb(244, 246, 249)"
        };
        assert_eq!(seen[1], json!(background), "{seen}");
        if dark {
            browser.screenshot("sign-in-dark", Backend::Sqlite).await;
        }
        browser.close().await;
    }
}

/// A chromedriver of this test's own, on a free port; killed when dropped.
struct Driver {
    child: Child,
    port: u16,
}

impl Driver {
    fn start() -> Self {
        let binary =
            std::env::var("INLET_CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".to_owned());
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let child = Command::new(&binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {binary} ({e}): install Debian's chromium and chromium-driver \
                     (.ci/run does), or set INLET_CHROMEDRIVER"
                )
            });
        Self { child, port }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A headless Chromium session looking at one Inlet.
struct Browser {
    client: Client,
    base: String,
    _driver: Driver,
}

impl Browser {
    async fn open(app: &TestApp) -> Self {
        Self::open_with(app, &[]).await
    }

    /// A browser started with `extra` command-line arguments.
    async fn open_with(app: &TestApp, extra: &[&str]) -> Self {
        let driver = Driver::start();
        let base = [
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--window-size=1280,1000",
            "--hide-scrollbars",
        ];
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({
                "binary": std::env::var("INLET_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_owned()),
                "args": args,
            }),
        );
        let url = format!("http://127.0.0.1:{}", driver.port);
        let last_error = std::sync::Mutex::new(String::new());
        let session = first_within(Duration::from_secs(10), || async {
            let connected = ClientBuilder::native()
                .capabilities(capabilities.clone())
                .connect(&url)
                .await;
            connected
                .map_err(|error| *last_error.lock().expect("last error") = error.to_string())
                .ok()
        })
        .await;
        let Some(client) = session else {
            let last_error = last_error.lock().expect("last error");
            panic!("no browser session from chromedriver within 10 s: {last_error}");
        };
        Self {
            client,
            base: app.address.clone(),
            _driver: driver,
        }
    }

    async fn visit(&self, path: &str) {
        self.client
            .goto(&format!("{}{path}", self.base))
            .await
            .expect("navigate");
    }

    async fn path(&self) -> String {
        let url = self.client.current_url().await.expect("the current URL");
        match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        }
    }

    /// The text of the first element matching `css`, waiting (up to 10 s) for it.
    async fn text(&self, css: &str) -> String {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page ({e})"))
            .text()
            .await
            .expect("text")
    }

    async fn click(&self, css: &str) {
        self.element(css).await.click().await.expect("click");
    }

    async fn element(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(Duration::from_secs(10))
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|e| panic!("no {css} on the page ({e})"))
    }

    /// Clicks a link or a form's button, and waits for the page it loads (the clicked
    /// element goes stale).
    async fn submit(&self, css: &str) {
        let button = self.element(css).await;
        button.click().await.expect("click");
        let loaded = format!("submitting {css} to load a page");
        eventually_within(&loaded, Duration::from_secs(10), || async {
            button.text().await.is_err()
        })
        .await;
    }

    async fn sign_in(&self, token: &str) {
        let field = self.element("input[name=token]").await;
        field.send_keys(token).await.expect("type the token");
        self.submit("form.signin button[type=submit]").await;
    }

    /// POSTs `body` (form-encoded) to `path` from inside the page, with the browser's own
    /// cookie, as a re-submitted form would: the status and the page it answered.
    async fn post_from_page(&self, path: &str, body: &str) -> (u16, String) {
        let answer = self
            .client
            .execute_async(
                "const [path, body, done] = arguments;
                 fetch(path, {method: 'POST', body, credentials: 'same-origin',
                              headers: {'content-type': 'application/x-www-form-urlencoded'}})
                   .then(async r => done([r.status, await r.text()]))
                   .catch(e => done([0, String(e)]));",
                vec![json!(path), json!(body)],
            )
            .await
            .expect("fetch from the page");
        (
            answer[0].as_u64().unwrap_or_default() as u16,
            answer[1].as_str().unwrap_or_default().to_owned(),
        )
    }

    /// The form fields of the first `form` matching `css`, form-encoded.
    async fn form_body(&self, css: &str, extra: &[(&str, &str)]) -> String {
        let fields = self
            .client
            .execute(
                "const form = document.querySelector(arguments[0]);
                 return Array.from(form.querySelectorAll('input[type=hidden]')).map(i => [i.name, i.value]);",
                vec![json!(css)],
            )
            .await
            .expect("read the form");
        let mut body = form_urlencoded::Serializer::new(String::new());
        for pair in fields.as_array().into_iter().flatten() {
            body.append_pair(
                pair[0].as_str().unwrap_or_default(),
                pair[1].as_str().unwrap_or_default(),
            );
        }
        for (name, value) in extra {
            body.append_pair(name, value);
        }
        body.finish()
    }

    async fn screenshot(&self, name: &str, backend: Backend) {
        if backend != Backend::Sqlite {
            return;
        }
        let png = self.client.screenshot().await.expect("a screenshot");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .map_or_else(|| std::path::PathBuf::from("target"), |p| p.to_path_buf())
            .join("console-screenshots");
        std::fs::create_dir_all(&dir).expect("the screenshot directory");
        std::fs::write(dir.join(format!("{name}.png")), png).expect("write the screenshot");
    }

    async fn close(self) {
        let _ = self.client.close().await;
    }
}

/// An Inlet whose stripe source delivers to `server`, failing for good after one attempt.
async fn app_delivering_to(backend: Backend, server: &MockServer) -> TestApp {
    app_delivering_with(backend, server, "").await
}

/// [`app_delivering_to`] with `extra` lines in the destination's table.
async fn app_delivering_with(backend: Backend, server: &MockServer, extra: &str) -> TestApp {
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nname = \"app\"\n\
             retry_base = \"20ms\"\nretry_cap = \"100ms\"\n{extra}",
            server.uri()
        )),
        ..Default::default()
    };
    spawn_app_with(backend, options).await
}

async fn an_operator_signs_in_finds_an_event_and_signs_out(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_delivering_to(backend, &server).await;
    for (id, object) in [("evt_console_1", "pi_1"), ("evt_console_2", "pi_2")] {
        app.post_stripe(&stripe_event(id, "payment_intent.succeeded", object))
            .await
            .assert_status(200);
    }
    // A copy of the first payment under another event id: the ledger's duplicate.
    app.post_stripe(&stripe_event(
        "evt_console_3",
        "payment_intent.succeeded",
        "pi_1",
    ))
    .await
    .assert_status(200);
    let browser = Browser::open(&app).await;

    browser.visit("/console/events").await;
    assert_eq!(
        browser.path().await,
        "/console/login?next=%2Fconsole%2Fevents"
    );
    browser.sign_in("not-the-operator-token-at-all").await;
    assert!(browser
        .text("p.notice")
        .await
        .contains("not an operator's token"));
    browser.sign_in(OPERATOR_TOKEN).await;
    assert_eq!(browser.path().await, "/console/events");
    let listing = browser.text("table.events").await;
    for id in ["evt_console_1", "evt_console_2", "evt_console_3"] {
        assert!(listing.contains(id), "{listing}");
    }
    assert!(listing.contains("duplicate_fact"), "{listing}");
    // On a phone's width the page still fits: nothing wider than the window.
    browser
        .client
        .set_window_size(390, 844)
        .await
        .expect("resize");
    let overflow = browser
        .client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            vec![],
        )
        .await
        .expect("measure");
    assert_eq!(
        overflow,
        json!(true),
        "the events page is wider than a phone"
    );
    browser
        .client
        .set_window_size(1280, 1000)
        .await
        .expect("resize");
    // At 1280 px, with a realistic event (a 28-character id, a long type, a subscription's
    // fact key) among them, every column shows without a horizontal scrollbar, the fact
    // included; the date filters show the format, not a date.
    app.post_stripe(&stripe_event(
        "evt_3QxJ2bLkdIwHu7ix0n6Yf1Ab",
        "customer.subscription.trial_will_end",
        "sub_1QxK7pLkdIwHu7ixr3Lm9Wq2",
    ))
    .await
    .assert_status(200);
    browser.visit("/console/events").await;
    let fits = browser
        .client
        .execute(
            "const s = document.querySelector('table.events').parentElement; \
             return s.scrollWidth <= s.clientWidth;",
            vec![],
        )
        .await
        .expect("measure");
    assert_eq!(
        fits,
        json!(true),
        "the events table scrolls sideways at 1280 px"
    );
    let placeholder = browser
        .client
        .execute(
            "return document.querySelector('input[name=since]').placeholder;",
            vec![],
        )
        .await
        .expect("read");
    assert_eq!(placeholder, json!("YYYY-MM-DD HH:MM (UTC)"));

    browser
        .visit("/console/events?outcome=duplicate_fact")
        .await;
    let duplicates = browser.text("table.events").await;
    assert!(duplicates.contains("evt_console_3") && !duplicates.contains("evt_console_2"));

    browser.visit("/console/events").await;
    browser
        .submit("a[href='/console/events/stripe/evt_console_2']")
        .await;
    assert_eq!(browser.path().await, "/console/events/stripe/evt_console_2");
    assert!(browser.text("pre.payload").await.contains("\"pi_2\""));
    assert!(browser
        .text("table.headers")
        .await
        .contains("stripe-signature"));
    eventually("the delivery on the event page", || async {
        browser.visit("/console/events/stripe/evt_console_2").await;
        browser.text("table.deliveries").await.contains("delivered")
    })
    .await;
    let attempts = browser.text("table.attempts").await;
    assert!(
        attempts.contains("delivered") && attempts.contains("200"),
        "{attempts}"
    );
    // Every time on the page in one form, `2026-11-30 16:53:24 UTC`: none as RFC 3339.
    let page = browser.text("main").await;
    assert_eq!(times(&page, b'T'), 0, "a time in another form: {page}");
    assert!(
        times(&page, b' ') >= 4,
        "received, kept until, attempt, delivered: {page}"
    );

    browser.visit("/console").await;
    // This instance's traffic: 3 accepted and 1 duplicate_fact for stripe.
    let traffic = browser.text("section.card table").await;
    let traffic = traffic.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(traffic.contains("stripe accepted 3 3"), "{traffic}");
    assert!(traffic.contains("stripe duplicate_fact 1 1"), "{traffic}");
    let bars = browser
        .client
        .find_all(Locator::Css("svg.chart rect"))
        .await
        .expect("bars");
    assert!((2..=3).contains(&bars.len()), "{} bars", bars.len());
    browser.visit("/console/sources").await;
    let sources = browser.text("main").await;
    assert!(sources.contains("100.0 %"), "{sources}");
    assert!(
        sources.contains("every event"),
        "the events filter: {sources}"
    );

    browser.submit("form.signout button").await;
    assert_eq!(browser.path().await, "/console/login");
    browser.visit("/console").await;
    assert_eq!(browser.path().await, "/console/login?next=%2Fconsole");
    browser.close().await;
}

async fn a_payload_with_a_script_renders_as_text_and_runs_nothing(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_delivering_to(backend, &server).await;
    let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    let body = serde_json::json!({
        "id": "evt_<b>bold</b>", "object": "event", "type": "customer.updated",
        "data": { "object": { "id": "cus_1", "name": hostile } },
    })
    .to_string()
    .into_bytes();
    app.post_stripe(&body).await.assert_status(200);
    let browser = Browser::open(&app).await;
    browser.visit("/console/login").await;
    browser.sign_in(OPERATOR_TOKEN).await;
    browser.visit("/console/events").await;
    assert!(browser
        .text("table.events")
        .await
        .contains("evt_<b>bold</b>"));
    browser.submit("table.events td.id a").await;
    let payload = browser.text("pre.payload").await;
    assert!(payload.contains(hostile), "{payload}");
    // Nothing ran: no dialog opened, and the page holds no element the payload named.
    assert!(browser.client.get_alert_text().await.is_err());
    let elements = browser
        .client
        .execute(
            "return [document.scripts.length, document.images.length, document.querySelectorAll('main b').length];",
            vec![],
        )
        .await
        .expect("count elements");
    assert_eq!(elements, json!([0, 0, 0]));
    browser.close().await;
}

async fn a_dead_letter_is_requeued_once_however_often_the_form_is_sent(backend: Backend) {
    let server = application_answering(422).await;
    let app = app_delivering_to(backend, &server).await;
    app.post_stripe(&stripe_event(
        "evt_console_dead",
        "charge.succeeded",
        "ch_dead",
    ))
    .await
    .assert_status(200);
    let attempts = || async {
        requests_per_key(&server)
            .await
            .get("stripe:evt_console_dead")
            .copied()
    };
    eventually("the first attempt", || async {
        attempts().await == Some(1)
    })
    .await;
    let browser = Browser::open(&app).await;
    browser.visit("/console/login").await;
    browser.sign_in(OPERATOR_TOKEN).await;
    eventually("the dead letter listed", || async {
        browser.visit("/console/deliveries?status=dead").await;
        browser.text("main").await.contains("evt_console_dead")
    })
    .await;
    let dead_id = browser
        .client
        .find(Locator::Css("input[name=id]"))
        .await
        .expect("a dead letter's checkbox")
        .attr("value")
        .await
        .expect("its id")
        .expect("a value");
    let form = browser
        .form_body(
            "form[action='/console/deliveries'][method=post]",
            &[("id", &dead_id), ("action", "requeue")],
        )
        .await;
    browser.click("input[name=id]").await;
    browser.submit("button[value=requeue]").await;
    assert!(browser.text("p.notice").await.contains("Done"));
    assert!(browser.text("table").await.contains("requeued"));
    // The requeued delivery is tried again, fails for good again: dead once more.
    eventually("the second attempt", || async {
        attempts().await == Some(2)
    })
    .await;
    eventually("dead again", || async {
        app.deliveries_with_status("dead").await == 1
    })
    .await;
    // The same form sent again (a double click, a re-submit): the stored result, no
    // second requeue.
    let (status, page) = browser.post_from_page("/console/deliveries", &form).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("already submitted"), "{page}");
    // A second requeue would be tried before this holds.
    nothing_left_to_send(&app).await;
    assert_eq!(attempts().await, Some(2));

    // Dead again: set aside for good from the page.
    browser.visit("/console/deliveries?status=dead").await;
    browser.click("input[name=id]").await;
    browser.submit("button[value=discard]").await;
    assert!(browser.text("table").await.contains("discarded"));
    browser.visit("/console/deliveries?status=discarded").await;
    assert!(browser
        .text("table.deliveries")
        .await
        .contains("evt_console_dead"));
    browser.close().await;
}

async fn a_replay_is_previewed_then_confirmed(backend: Backend) {
    let server = application_answering(200).await;
    let app = app_delivering_to(backend, &server).await;
    app.post_stripe(&stripe_event("evt_console_replay", "invoice.paid", "in_1"))
        .await
        .assert_status(200);
    let delivered = || async {
        requests_per_key(&server)
            .await
            .get("stripe:evt_console_replay")
            .copied()
    };
    eventually("the delivery settled", || async {
        app.deliveries_with_status("delivered").await == 1
    })
    .await;
    assert_eq!(delivered().await, Some(1));
    let browser = Browser::open(&app).await;
    browser.visit("/console/login").await;
    browser.sign_in(OPERATOR_TOKEN).await;
    browser
        .visit("/console/events/stripe/evt_console_replay")
        .await;
    browser
        .submit("form[action='/console/replay/preview'] button")
        .await;
    assert_eq!(browser.path().await, "/console/replay/preview");
    let preview = browser.text("table.results").await;
    assert!(
        preview.contains("requeued") && preview.contains("app"),
        "{preview}"
    );
    browser.screenshot("replay-preview", backend).await;
    // Had the preview requeued anything, it would be sent before this holds.
    nothing_left_to_send(&app).await;
    assert_eq!(delivered().await, Some(1), "a preview changes nothing");
    let confirm = browser
        .form_body("form[action='/console/replay']", &[])
        .await;
    browser
        .submit("form[action='/console/replay'] button")
        .await;
    assert!(browser.text("p.notice").await.contains("Done"));
    eventually("the replayed delivery", || async {
        delivered().await == Some(2)
    })
    .await;
    let (status, page) = browser.post_from_page("/console/replay", &confirm).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("already submitted"), "{page}");
    // A second replay would be sent before this holds.
    nothing_left_to_send(&app).await;
    assert_eq!(delivered().await, Some(2), "the confirmation replays once");
    browser.close().await;
}

async fn the_event_page_shows_filters_and_tries_an_expression(backend: Backend) {
    let server = application_answering(200).await;
    let filter = "filter = '.data.object.amount > 5000'\ntransform = '{paid: .data.object.amount}'";
    let app = app_delivering_with(backend, &server, filter).await;
    app.post_stripe(&stripe_event("evt_console_filter", "invoice.paid", "in_f"))
        .await
        .assert_status(200);
    let browser = Browser::open(&app).await;
    browser.visit("/console/login").await;
    browser.sign_in(OPERATOR_TOKEN).await;
    browser
        .visit("/console/events/stripe/evt_console_filter")
        .await;
    // The event's amount is 2000: the filter skips it, the transform shows its shape.
    let section = browser.text("#routing table#evaluation").await;
    assert!(section.contains(".data.object.amount > 5000"), "{section}");
    assert!(section.contains("skip"), "{section}");
    assert!(section.contains("\"paid\": 2000"), "{section}");
    let field = browser.element("form.try textarea[name=filter]").await;
    field
        .send_keys(".data.object.amount == 2000 and $type == \"invoice.paid\"")
        .await
        .expect("type a filter");
    browser.submit("form.try button[type=submit]").await;
    assert_eq!(browser.path().await, "/console/evaluate");
    let result = browser.text("table#evaluation").await;
    assert!(result.contains("enqueue"), "{result}");
    // What was typed is shown escaped, as text, and kept in the form.
    let kept = browser.element("form.try textarea[name=filter]").await;
    let typed = kept
        .prop("value")
        .await
        .expect("the field")
        .unwrap_or_default();
    assert!(typed.contains("$type == \"invoice.paid\""), "{typed}");
    browser.screenshot("filters", backend).await;
    let broken = browser
        .form_body("form.try", &[("filter", ".data |\n map(")])
        .await;
    let (status, page) = browser.post_from_page("/console/evaluate", &broken).await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("line 2"), "{page}");
    assert_eq!(app.count_deliveries().await, 0, "trying changes nothing");
    browser.close().await;
}

async fn forms_without_the_csrf_token_and_pages_without_a_session_are_refused(backend: Backend) {
    let server = application_answering(422).await;
    let app = app_delivering_to(backend, &server).await;
    let browser = Browser::open(&app).await;
    for page in [
        "/console",
        "/console/events",
        "/console/deliveries",
        "/console/sources",
    ] {
        browser.visit(page).await;
        assert!(
            browser.path().await.starts_with("/console/login?next="),
            "{page}"
        );
    }
    browser.sign_in(OPERATOR_TOKEN).await;
    browser.visit("/console/deliveries").await;
    let (status, page) = browser
        .post_from_page(
            "/console/deliveries",
            "action=requeue&id=1&idempotency_key=k1",
        )
        .await;
    assert_eq!(status, 403, "{page}");
    assert!(page.contains("CSRF"), "{page}");
    let (status, _) = browser
        .post_from_page(
            "/console/deliveries",
            "action=requeue&id=1&idempotency_key=k1&csrf=0000",
        )
        .await;
    assert_eq!(status, 403);
    // With the right token, a form's Idempotency-Key is held to the API's rules.
    let csrf = browser
        .client
        .execute(
            "return document.querySelector('input[name=csrf]').value;",
            vec![],
        )
        .await
        .expect("the page's CSRF token");
    let long_key = "k".repeat(300);
    let (status, page) = browser
        .post_from_page(
            "/console/deliveries",
            &format!(
                "action=requeue&id=1&idempotency_key={long_key}&csrf={}",
                csrf.as_str().unwrap_or_default()
            ),
        )
        .await;
    assert_eq!(status, 400, "{page}");
    assert!(page.contains("1 to 255 printable characters"), "{page}");
    // Every console page forbids framing and inline script.
    let reply = app.get("/console/login").await;
    assert_eq!(reply.header("x-frame-options"), Some("DENY"));
    assert!(
        reply
            .header("content-security-policy")
            .is_some_and(
                |csp| csp.contains("default-src 'self'") && csp.contains("script-src 'none'")
            )
    );
    browser.close().await;
}

async fn an_open_breaker_stands_out_on_the_sources_page_and_the_overview(backend: Backend) {
    let server = application_answering(503).await;
    let limits = "breaker = { failures = 2, cooldown = \"10m\" }\nmax_in_flight = 4\nrate = 50";
    let app = app_delivering_with(backend, &server, limits).await;
    for (id, object) in [
        ("evt_breaker_1", "ch_breaker_1"),
        ("evt_breaker_2", "ch_breaker_2"),
    ] {
        app.post_stripe(&stripe_event(id, "charge.succeeded", object))
            .await
            .assert_status(200);
    }
    eventually("the breaker open", || async {
        gate(&app, "app").await["breaker"] == "open"
    })
    .await;
    let failures = gate(&app, "app").await["consecutive_failures"]
        .as_i64()
        .expect("consecutive_failures");
    assert!(failures >= 2, "{failures}");
    let browser = Browser::open(&app).await;
    browser
        .visit("/console/login?next=%2Fconsole%2Fsources")
        .await;
    browser.sign_in(OPERATOR_TOKEN).await;
    assert_eq!(browser.path().await, "/console/sources");
    let row = browser.text("table.destinations tr.breaker-open").await;
    assert!(row.starts_with("app"), "{row}");
    assert_eq!(browser.text("tr.breaker-open .badge.open").await, "open");
    for shown in ["open until ", "/ 4", "50/s, burst 50"] {
        assert!(row.contains(shown), "{shown} in {row}");
    }
    // The count as the gate had it when the page was drawn: a delivery still in flight
    // when the breaker opened may add a failure after `failures` was read.
    let shown = failure_count(&row);
    let after = gate(&app, "app").await["consecutive_failures"]
        .as_i64()
        .expect("consecutive_failures");
    assert!(
        (failures..=after).contains(&shown),
        "{shown} failures shown, the gate had {failures} before and {after} after: {row}"
    );
    browser.screenshot("sources-breaker", backend).await;

    browser.visit("/console").await;
    let backlog = browser.text("tr.breaker-open").await;
    let backlog = backlog.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(backlog.starts_with("stripe app"), "{backlog}");
    let last = gate(&app, "app").await["consecutive_failures"]
        .as_i64()
        .expect("consecutive_failures");
    assert!(backlog.contains("open until"), "{backlog}");
    assert!(
        (shown..=last).contains(&failure_count(&backlog)),
        "the gate had {shown} to {last} failures: {backlog}"
    );
    browser.close().await;
}

/// The `N` of the first `N failures` in a page's text.
fn failure_count(text: &str) -> i64 {
    text.split(" failures")
        .next()
        .and_then(|before| before.rsplit([' ', '·']).find(|w| !w.is_empty()))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no failure count in {text}"))
}

/// Wrong tokens in a row make the next attempts wait (429, counted), and the right token
/// still works once the wait is over; no session cookie is ever set for a wrong token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_wrong_tokens_make_sign_in_wait() {
    let app = crate::helpers::spawn_app(Backend::Sqlite).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let attempt = |token: &'static str| {
        let (app, client) = (&app, &client);
        async move {
            let response = client
                .post(format!("{}/console/login", app.address))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("token={token}&next=%2Fconsole"))
                .send()
                .await
                .expect("a sign-in answer");
            let cookie = response.headers().get("set-cookie").is_some();
            (
                response.status().as_u16(),
                cookie,
                response.text().await.unwrap_or_default(),
            )
        }
    };
    for _ in 0..4 {
        let (status, cookie, page) = attempt("wrong-token-wrong-token").await;
        assert_eq!((status, cookie), (401, false), "{page}");
        assert!(page.contains("not an operator's token"));
    }
    let (status, cookie, page) = attempt(OPERATOR_TOKEN).await;
    assert_eq!((status, cookie), (429, false), "{page}");
    assert!(page.contains("Try again in"), "{page}");
    // The limiter runs on the instance's clock: the wait is waited out on it.
    app.clock.advance(chrono::Duration::milliseconds(1100));
    let (status, cookie, _) = attempt(OPERATOR_TOKEN).await;
    assert_eq!((status, cookie), (303, true));
}

/// With `console.bind` the console has a listener of its own, and the main listener does
/// not serve it; without an operator token there is no console at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_can_have_its_own_listener() {
    let options = TestOptions {
        extra_sources: "\n[console]\nbind = \"127.0.0.1:0\"\n".to_owned(),
        ..Default::default()
    };
    let app = spawn_app_with(Backend::Sqlite, options).await;
    let console = app.console_address.clone().expect("a console listener");
    let on_console = reqwest::get(format!("{console}/console/login"))
        .await
        .expect("an answer");
    assert_eq!(on_console.status().as_u16(), 200);
    assert!(on_console
        .text()
        .await
        .unwrap_or_default()
        .contains("Operator token"));
    app.get("/console/login").await.assert_status(404);
    // The webhook path is not on the console's listener.
    let webhook = reqwest::Client::new()
        .post(format!("{console}/webhooks/stripe"))
        .body("{}")
        .send()
        .await
        .expect("an answer");
    assert_eq!(webhook.status().as_u16(), 404);

    let settings = inlet::config::Settings::from_toml(
        "[[sources]]\nname = \"s\"\nscheme = \"github\"\nsecrets = [\"gh-secret-0123456789abcdef\"]\n[console]\nenabled = true\n",
    );
    let error = settings.expect_err("a console without a token").to_string();
    assert!(error.contains("operator.token"), "{error}");
}

/// Two people sign in with their own tokens: the viewer reads every page and finds no
/// action on any, the operator requeues a dead letter, and the Audit page names each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_viewer_and_an_operator_see_what_their_roles_allow() {
    let server = application_answering(422).await;
    let options = TestOptions {
        operators: "[[operators]]\nname = \"vera\"\nrole = \"viewer\"\ntoken = \"viewer-token-vera-0123456789\"\n\
                    [[operators]]\nname = \"otto\"\nrole = \"operator\"\ntoken = \"operator-token-otto-0123456789\"\n",
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nname = \"app\"\nmax_attempts = 1",
            server.uri()
        )),
        ..Default::default()
    };
    let app = spawn_app_with(Backend::Sqlite, options).await;
    app.post_stripe(&stripe_event("evt_roles", "charge.succeeded", "ch_roles"))
        .await
        .assert_status(200);
    eventually("a dead letter", || async {
        app.deliveries_with_status("dead").await == 1
    })
    .await;
    let browser = Browser::open(&app).await;
    browser.visit("/console/login").await;
    browser.sign_in("viewer-token-vera-0123456789").await;
    assert_eq!(browser.text("form.signout .who").await, "vera · viewer");
    browser.visit("/console/deliveries?status=dead").await;
    assert!(browser.text("main").await.contains("evt_roles"));
    let actions = browser
        .client
        .find_all(Locator::Css(
            "input[name=id], button[value=requeue], button[value=discard]",
        ))
        .await
        .expect("a query");
    assert!(actions.is_empty(), "a viewer is offered no action");
    browser.visit("/console/events/stripe/evt_roles").await;
    assert!(browser.text("main").await.contains("Request headers"));
    let replay = browser
        .client
        .find_all(Locator::Css("form[action='/console/replay/preview']"))
        .await
        .expect("a query");
    assert!(replay.is_empty(), "no replay button for a viewer");
    browser.submit("form.signout button").await;
    browser.sign_in("operator-token-otto-0123456789").await;
    assert_eq!(browser.text("form.signout .who").await, "otto · operator");
    browser.visit("/console/deliveries?status=dead").await;
    browser.click("input[name=id]").await;
    browser.submit("button[value=requeue]").await;
    assert!(browser.text("p.notice").await.contains("Done"));
    browser.visit("/console/audit").await;
    browser.screenshot("audit", Backend::Sqlite).await;
    let trail = browser.text("table.audit").await;
    for expected in [
        "vera",
        "otto",
        "sign_in",
        "sign_out",
        "requeue",
        "1 dead letter (requeued 1)",
    ] {
        assert!(trail.contains(expected), "{expected} in {trail}");
    }
    browser.close().await;
}

/// How many times `page` shows a date and time `YYYY-MM-DD<sep>HH:MM`.
fn times(page: &str, sep: u8) -> usize {
    let shape = b"dddd-dd-ddSdd:dd";
    page.as_bytes()
        .windows(shape.len())
        .filter(|w| {
            w.iter().zip(shape).all(|(b, s)| match s {
                b'd' => b.is_ascii_digit(),
                b'S' => *b == sep,
                other => b == other,
            })
        })
        .count()
}

/// Whether the page fits a 390 px phone: nothing wider than the window.
async fn fits_a_phone(browser: &Browser, path: &str) -> bool {
    browser.visit(path).await;
    let fits = browser
        .client
        .execute(
            "return document.documentElement.scrollWidth <= window.innerWidth;",
            vec![],
        )
        .await
        .expect("measure");
    fits == json!(true)
}

/// A port nothing listens on: bound, then let go.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

async fn on_call_finds_an_event_by_its_payload_and_sees_why_it_failed(backend: Backend) {
    let server = application_answering(200).await;
    let port = closed_port();
    let down = format!(
        "\n[[sources.destinations]]\nurl = \"http://127.0.0.1:{port}/hooks\"\nname = \"ledger\"\n\
         secret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nretry_base = \"5s\"\nretry_cap = \"10s\"\n\
         breaker = {{ failures = 1000, cooldown = \"1s\" }}\n"
    );
    let app = std::sync::Arc::new(app_delivering_with(backend, &server, &down).await);
    // A realistic day in miniature: 200 Stripe events (some retried copies), 60 of
    // another source, one destination answering and one refusing connections.
    let types = [
        "charge.succeeded",
        "invoice.paid",
        "customer.updated",
        "payment_intent.succeeded",
    ];
    for chunk in (0..200).collect::<Vec<usize>>().chunks(25) {
        let mut posts = tokio::task::JoinSet::new();
        for &i in chunk {
            let app = app.clone();
            posts.spawn(async move {
                let id = format!("evt_oncall_{i}");
                let body = stripe_event(&id, types[i % 4], &format!("order_{}", 4700 + i));
                let first = app.post_stripe(&body).await.status;
                let copy = if i % 10 == 3 {
                    app.post_stripe(&body).await.status
                } else {
                    200
                };
                let acme = format!(
                    r#"{{"type":"shipment.created","order":"order_{}"}}"#,
                    4700 + i
                );
                let other = if i < 60 {
                    app.post_signed("acme", acme.as_bytes(), &format!("ship_{i}"), None)
                        .await
                        .status
                } else {
                    200
                };
                [first, copy, other]
            });
        }
        assert!(posts.join_all().await.iter().flatten().all(|s| *s == 200));
    }
    eventually("the attempts", || async {
        let shown = app
            .admin("/admin/events/stripe/evt_oncall_11", None, None)
            .await
            .json();
        let deliveries = shown["deliveries"].as_array().cloned().unwrap_or_default();
        deliveries.len() == 2 && deliveries.iter().all(|d| d["attempts"][0].is_object())
    })
    .await;
    let browser = Browser::open(&app).await;
    browser.visit("/console/login?next=%2Fconsole").await;
    browser.sign_in(OPERATOR_TOKEN).await;
    browser.screenshot("overview", backend).await;
    browser.visit("/console/sources").await;
    browser.screenshot("sources", backend).await;
    browser.visit("/console/events").await;
    let count = browser.text("p.count").await;
    assert!(count.contains("of 260 matching"), "{count}");
    browser.screenshot("events", backend).await;
    // A value inside the payloads: the order is in one Stripe event and one shipment.
    browser.visit("/console/events?q=order_4711").await;
    assert!(browser.text("p.count").await.contains("1–2 of 2 matching"));
    let both = browser.text("table.events").await;
    assert!(
        both.contains("evt_oncall_11") && both.contains("ship_11"),
        "{both}"
    );
    browser
        .visit("/console/events?source=stripe&q=order_4711")
        .await;
    // Found by a value inside the payload, alone, with its deliveries at a glance.
    let listing = browser.text("table.events").await;
    assert!(listing.contains("evt_oncall_11"), "{listing}");
    assert_eq!(
        browser
            .client
            .find_all(Locator::Css("table.events tbody tr"))
            .await
            .expect("rows")
            .len(),
        1
    );
    assert!(browser.text("p.count").await.contains("1–1 of 1 matching"));
    let states = browser.text("table.events td.states").await;
    assert!(states.contains("app delivered"), "{states}");
    assert!(
        states.contains(&format!(
            "ledger pending connection refused (127.0.0.1:{port})"
        )),
        "{states}"
    );
    // The event page says what happened to the attempt, and where.
    browser.submit("table.events td.id a").await;
    // At the top of the event page: each delivery's state and why it has not arrived.
    let glance = browser.text("dl.facts").await;
    assert!(glance.contains("app delivered after 1 attempt"), "{glance}");
    assert!(
        glance.contains(&format!("connection refused (127.0.0.1:{port})")),
        "{glance}"
    );
    let attempts = browser.text("table.attempts").await;
    assert!(
        attempts.contains(&format!("connection refused (127.0.0.1:{port}):")),
        "{attempts}"
    );
    assert!(
        attempts.contains("Connection refused"),
        "the cause underneath: {attempts}"
    );
    browser.screenshot("event", backend).await;
    let curl = browser.text("pre.curl").await;
    assert!(
        curl.contains("curl -sS -X POST") && curl.contains("stripe-signature: t="),
        "{curl}"
    );
    assert!(curl.contains("/webhooks/stripe"), "{curl}");
    // Every time on the page in one form, as a <time> element.
    let times = browser
        .client
        .find_all(Locator::Css("main time"))
        .await
        .expect("times");
    assert!(times.len() >= 4, "{} <time> elements", times.len());
    for element in &times {
        let text = element.text().await.expect("text");
        assert!(text.len() == 23 && text.ends_with(" UTC"), "{text}");
    }
    // The overview refreshes itself only when asked to.
    browser.visit("/console?refresh=10").await;
    let refresh = browser
        .client
        .find_all(Locator::Css("meta[http-equiv=refresh]"))
        .await
        .expect("meta");
    assert_eq!(refresh.len(), 1);
    browser.visit("/console").await;
    let none = browser
        .client
        .find_all(Locator::Css("meta[http-equiv=refresh]"))
        .await
        .expect("meta");
    assert!(none.is_empty());
    browser
        .client
        .set_window_size(390, 844)
        .await
        .expect("resize");
    for path in [
        "/console/events",
        "/console/events/stripe/evt_oncall_11",
        "/console/deliveries",
        "/console/sources",
        "/console",
        "/console/bulk",
        "/console/audit",
    ] {
        assert!(
            fits_a_phone(&browser, path).await,
            "{path} is wider than a phone"
        );
    }
    browser.visit("/console/events?q=order_4711").await;
    // Every column on the screen: the last cell of the row is inside the window.
    let last_cell_fits = browser
        .client
        .execute(
            "const cell = document.querySelector('table.events tbody tr td:last-child');
             return cell.getBoundingClientRect().right <= window.innerWidth && cell.offsetWidth > 0;",
            vec![],
        )
        .await
        .expect("measure");
    assert_eq!(
        last_cell_fits,
        json!(true),
        "the events table hides its last column"
    );
    browser.screenshot("events-phone", backend).await;
    browser.close().await;
}

async fn a_bulk_requeue_of_500_is_previewed_confirmed_once_and_survives_a_restart(
    backend: Backend,
) {
    let server = crate::helpers::refusing_first(500, r#"{"error":"customer locked"}"#).await;
    let options = TestOptions {
        destination: Some(format!(
            "url = \"{}/events\"\nsecret = \"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\"\nname = \"app\"\n\
             retry_base = \"20ms\"\nretry_cap = \"100ms\"\n",
            server.uri()
        )),
        ..Default::default()
    };
    let app = std::sync::Arc::new(spawn_app_with(backend, options.clone()).await);
    let types = [
        "charge.succeeded",
        "invoice.paid",
        "customer.updated",
        "payment_intent.succeeded",
    ];
    crate::helpers::post_events(&app, "evt_bulk", 500, &types).await;
    let dead = || async {
        app.admin("/admin/deliveries?status=dead&limit=500", None, None)
            .await
            .json()["deliveries"]
            .as_array()
            .map_or(0, Vec::len)
    };
    crate::helpers::eventually_within("500 dead letters", Duration::from_secs(120), || async {
        dead().await == 500
    })
    .await;
    let browser = Browser::open(&app).await;
    browser
        .visit("/console/login?next=%2Fconsole%2Fdeliveries%3Fstatus%3Ddead")
        .await;
    browser.sign_in(OPERATOR_TOKEN).await;
    browser.screenshot("deliveries", backend).await;
    browser
        .submit("a[href^='/console/bulk?action=requeue']")
        .await;
    browser.screenshot("bulk", backend).await;
    browser
        .submit("form[action='/console/bulk/preview'] button")
        .await;
    assert!(browser
        .text("p.lead")
        .await
        .starts_with("500 dead letters match"));
    let counts = browser.text("table.counts").await;
    assert!(counts.contains("app 500"), "{counts}");
    browser.screenshot("bulk-preview", backend).await;
    let confirm = browser.form_body("form[action='/console/bulk']", &[]).await;
    app.faults.crash_bulk_batch(3);
    browser.submit("form[action='/console/bulk'] button").await;
    let progress_path = browser.path().await;
    assert!(
        progress_path.starts_with("/console/bulk/"),
        "{progress_path}"
    );
    let id: i64 = progress_path
        .trim_start_matches("/console/bulk/")
        .parse()
        .expect("an id");
    // The same form again (a double click, a re-submit): the same action, nothing new.
    let (status, page) = browser.post_from_page("/console/bulk", &confirm).await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("already submitted"), "{page}");
    assert!(page.contains(&format!("Bulk action {id}")), "{page}");
    crate::helpers::eventually_within("two batches", Duration::from_secs(30), || async {
        app.admin(&format!("/admin/bulk/{id}"), None, None)
            .await
            .json()["processed"]
            == 200
    })
    .await;
    browser.visit(&progress_path).await;
    assert_eq!(
        browser
            .client
            .find_all(Locator::Css("meta[http-equiv=refresh]"))
            .await
            .expect("meta")
            .len(),
        1
    );
    assert!(browser.text("span.count").await.starts_with("200 of 500"));
    browser.screenshot("bulk-progress", backend).await;
    browser.close().await;
    // A restart mid-way: this instance goes; another takes the lease when it expires.
    let mut app = std::sync::Arc::into_inner(app).expect("one owner");
    app.stop().await;
    let restarted = app.another_instance(options).await;
    let browser = Browser::open(&restarted).await;
    browser.visit("/console/login").await;
    browser.sign_in(OPERATOR_TOKEN).await;
    crate::helpers::eventually_within("the action done", Duration::from_secs(60), || async {
        browser.visit(&progress_path).await;
        browser.text("dl.facts").await.contains("done")
    })
    .await;
    assert!(browser.text("span.count").await.starts_with("500 of 500"));
    assert!(browser
        .client
        .find_all(Locator::Css("meta[http-equiv=refresh]"))
        .await
        .expect("meta")
        .is_empty());
    assert!(browser.text("table.counts").await.contains("requeued 500"));
    crate::helpers::eventually_within("500 deliveries", Duration::from_secs(120), || async {
        requests_per_key(&server)
            .await
            .values()
            .filter(|n| **n == 2)
            .count()
            == 500
    })
    .await;
    let per_key = requests_per_key(&server).await;
    assert!(
        per_key.len() == 500 && per_key.values().all(|n| *n == 2),
        "{per_key:?}"
    );
    let listed = restarted.admin("/admin/bulk", None, None).await.json();
    assert_eq!(
        listed["actions"].as_array().map(Vec::len),
        Some(1),
        "one action: {listed}"
    );
    browser.close().await;
}

/// An asana source's page: no secret yet, then when its handshake established one — never
/// the secret.
async fn the_sources_page_says_when_a_handshake_secret_was_established_never_what(
    backend: Backend,
) {
    let secret = "b537207f20cbfa02357cf448134da559e8bd39d61597dcd5631b8012eae53e81";
    let options = TestOptions {
        extra_sources: "\n[[sources]]\nname = \"asana\"\nscheme = \"asana\"\n".to_owned(),
        ..Default::default()
    };
    let app = spawn_app_with(backend, options).await;
    let browser = Browser::open(&app).await;
    browser.visit("/console/login?next=%2Fconsole").await;
    browser.sign_in(OPERATOR_TOKEN).await;
    browser.visit("/console/sources").await;
    let before = browser.text("main").await;
    assert!(before.contains("none yet"), "{before}");
    app.post_webhook("asana", b"", &[("X-Hook-Secret", secret)])
        .await
        .assert_status(200);
    browser.visit("/console/sources").await;
    let after = browser.text("main").await;
    assert!(after.contains("Handshake secret"), "{after}");
    assert!(after.contains("established"), "{after}");
    assert!(!after.contains(secret), "{after}");
    browser.close().await;
}
