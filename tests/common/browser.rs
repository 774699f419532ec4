//! A real headless Chromium for end-to-end tests of the dashboard, driven over the DevTools
//! protocol ([`super::cdp`]) from the Rust test suite, used by the `dashboard_*` tests.
//!
//! [`Browser::start`] gives the test process's Debian `chromium` (installed by `.ci/run`),
//! started by the first test that asks with a fresh profile and the flags it needs on a
//! closed network, and shared by all. Each [`Session`] is a browser
//! context of its own (own cookies), so one test can play the owner and a collaborator side
//! by side. Every console error, uncaught exception and CSP violation of a session's page is
//! collected, and [`Session::assert_clean`] (also run after every navigation) fails the test
//! on any of them. [`Session::screenshot`] saves a PNG under `target/screenshots/` and prints
//! its path.
//!
//! ```ignore
//! let browser = Browser::start();
//! let owner = browser.session(&server_url);
//! owner.goto("/dashboard/login");
//! owner.fill("#email", "owner@example.com");
//! owner.fill("#password", &password);
//! owner.submit("form button[type=submit]");
//! assert!(owner.text("h1").contains("Endpoints"));
//! owner.screenshot("endpoints");
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use super::cdp::{Chromium, Page};

/// How long a page may take to load or an element to appear.
const TIMEOUT: Duration = Duration::from_secs(30);

/// Flags Chromium needs here: no sandbox (containers), no GPU, and nothing that phones home
/// (on a closed network those requests hang the start).
const FLAGS: [&str; 9] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
];

/// The test process's headless Chromium (one for every test: [`Chromium::shared`]).
pub struct Browser {
    chromium: &'static Chromium,
}

impl Browser {
    pub fn start() -> Browser {
        let program = crate::common::external_program("CHROMIUM", "/usr/bin/chromium", "chromium");
        Browser {
            chromium: Chromium::shared(&program, &FLAGS, (1280, 900)),
        }
    }

    /// A new browser context (its own cookies) with one tab, on the server at `base_url`.
    pub fn session(&self, base_url: &str) -> Session<'_> {
        let page = self.chromium.new_page(console_problem);
        for domain in ["Runtime.enable", "Log.enable"] {
            page.call(domain, json!({}))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        Session {
            page,
            base: base_url.trim_end_matches('/').to_string(),
        }
    }
}

/// axe-core's browser build: `$AXE_CORE_JS`, else where `.ci/run` installs it
/// (`npm install --prefix target/axe axe-core`).
fn axe_core_path() -> PathBuf {
    if let Some(path) = std::env::var_os("AXE_CORE_JS") {
        return PathBuf::from(path);
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("target/axe/node_modules/axe-core/axe.min.js");
    assert!(
        path.exists(),
        "axe-core is missing: run `npm install --prefix target/axe axe-core@4` (as .ci/run does) \
         or set AXE_CORE_JS"
    );
    path
}

/// A console error, an uncaught exception, or a browser log entry of level error (CSP
/// violations, failed loads), from a DevTools event.
fn console_problem(event: &Value) -> Option<String> {
    let params = &event["params"];
    match event["method"].as_str()? {
        "Runtime.consoleAPICalled" if params["type"] == "error" => {
            let args: Vec<String> = params["args"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| match a.get("value") {
                    Some(value) => value.to_string(),
                    None => a["description"].as_str().unwrap_or("?").to_string(),
                })
                .collect();
            Some(format!("console.error: {}", args.join(" ")))
        }
        "Runtime.exceptionThrown" => {
            let details = &params["exceptionDetails"];
            Some(format!(
                "uncaught exception: {} {}",
                details["text"].as_str().unwrap_or_default(),
                details["exception"]["description"]
                    .as_str()
                    .unwrap_or_default()
            ))
        }
        "Log.entryAdded" if params["entry"]["level"] == "error" => Some(format!(
            "browser log error: {} ({})",
            params["entry"]["text"].as_str().unwrap_or_default(),
            params["entry"]["url"].as_str().unwrap_or("no URL")
        )),
        _ => None,
    }
}

/// One browser context and its tab.
pub struct Session<'b> {
    page: Page<'b>,
    base: String,
}

impl Session<'_> {
    /// Opens `path` (relative to the server, or an absolute URL) and waits for the load.
    pub fn goto(&self, path: &str) {
        let url = if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}{path}", self.base)
        };
        self.mark_page();
        let navigation = self.call("Page.navigate", json!({ "url": url }));
        if let Some(error) = navigation["errorText"].as_str() {
            panic!("navigate to {url}: {error}");
        }
        self.wait_for_new_page(path);
    }

    /// Replaces the value of the input or textarea at `selector` with `text`, entered as
    /// typed text is (`Input.insertText`: the page sees `beforeinput` and `input` events, not
    /// one key event per character, which at two DevTools calls a character took seconds a
    /// field; see [`Session::on_element`]).
    pub fn fill(&self, selector: &str, text: &str) {
        self.on_element(selector, "e.focus(); e.value = ''; return true;");
        self.call("Input.insertText", json!({ "text": text }));
    }

    /// Sets the value of the input or textarea at `selector` at once, as pasting would: much
    /// faster than [`Session::fill`]'s typing for long values such as API keys.
    pub fn paste(&self, selector: &str, text: &str) {
        let text = Value::String(text.to_string());
        self.on_element(
            selector,
            &format!(
                "e.value = {text}; e.dispatchEvent(new Event('input', {{ bubbles: true }})); \
                 return true;"
            ),
        );
    }

    /// Ticks or unticks the checkbox at `selector`.
    pub fn set_checked(&self, selector: &str, on: bool) {
        let checked = self.on_element(selector, "return e.checked;");
        if checked.as_bool().unwrap_or(false) != on {
            self.click(selector);
        }
    }

    /// Clicks the element at `selector` (a submit button or a link) and waits until the
    /// next page has loaded.
    pub fn submit(&self, selector: &str) {
        self.mark_page();
        self.click(selector);
        self.wait_for_new_page(selector);
    }

    /// Clicks the button at `selector`, which asks first (`data-confirm`), answers the
    /// question with OK, and waits for the next page; returns the question asked (as the
    /// page's script put it together, which may add to `data-confirm`).
    pub fn submit_confirmed(&self, selector: &str) -> String {
        let question = self.eval(&format!(
            "document.querySelector({}).getAttribute('data-confirm')",
            Value::String(selector.to_string())
        ));
        let question = question
            .as_str()
            .unwrap_or_else(|| panic!("{selector} asks no question (data-confirm)"))
            .to_string();
        // The page's own confirm() would block the headless tab: answer it as OK, keeping the
        // question where the next page (same tab, same origin) can read it.
        self.eval(
            "sessionStorage.removeItem('asked'); \
             window.confirm = function (q) { sessionStorage.setItem('asked', q); return true; }; \
             true",
        );
        self.submit(selector);
        let asked = self.eval("sessionStorage.getItem('asked')");
        asked.as_str().map_or(question, str::to_string)
    }

    /// Creates an endpoint named `name` with the Endpoints page's form and returns its slug.
    pub fn create_endpoint(&self, name: &str) -> String {
        self.fill("#name", name);
        self.submit("form[action='/dashboard/endpoints'] button[type=submit]");
        self.endpoint_slug()
    }

    /// The slug of the endpoint page the session is on (`/dashboard/endpoints/{slug}…`).
    pub fn endpoint_slug(&self) -> String {
        let path = self.path();
        let rest = path
            .strip_prefix("/dashboard/endpoints/")
            .unwrap_or_else(|| panic!("{path} is not an endpoint page"));
        rest.split(['?', '/', '#'])
            .next()
            .unwrap_or_default()
            .to_string()
    }

    /// Logs in through the login form and lands on the endpoints page.
    pub fn login(&self, email: &str, password: &str) {
        self.goto("/dashboard/login");
        // Pasted, not typed: a keystroke lost on a loaded machine would fail the login and
        // the test with it (CI once landed on the login page again here).
        self.paste("#email", email);
        self.paste("#password", password);
        self.submit("form[action='/dashboard/login'] button[type=submit]");
        if self.path() != "/dashboard/endpoints" {
            let why = self.eval(
                "(document.querySelector('#login-error, .error') || {}).textContent || document.title",
            );
            panic!(
                "login as {email} failed: at {} ({why}; e-mail field {})",
                self.path(),
                self.eval("(document.querySelector('#email') || {}).value || ''")
            );
        }
    }

    /// Clicks the element at `selector` where the page's script answers without loading
    /// another page (a tab, a button that fetches); see [`Session::wait_until`].
    /// A real click: the mouse pressed and released at the middle of the element, scrolled
    /// into view first, so an element covered by another is not clicked through.
    pub fn click(&self, selector: &str) {
        let middle = self.on_element(
            selector,
            "e.scrollIntoView({ block: 'center', inline: 'center' }); \
             var r = e.getBoundingClientRect(); \
             return [r.left + r.width / 2, r.top + r.height / 2];",
        );
        let (Some(x), Some(y)) = (middle[0].as_f64(), middle[1].as_f64()) else {
            panic!("{selector}: no position ({middle})");
        };
        for kind in ["mouseMoved", "mousePressed", "mouseReleased"] {
            self.call(
                "Input.dispatchMouseEvent",
                json!({ "type": kind, "x": x, "y": y, "button": "left", "clickCount": 1 }),
            );
        }
    }

    /// Presses `key` (` `, `Enter`, `Tab`, `Escape` or an arrow key, by its DOM `key` name)
    /// on the focused element.
    pub fn press(&self, key: &str) {
        // DOM `code`, Windows virtual key code (what default actions such as moving a
        // selection go by) and the text the key types.
        let (code, key_code, text) = match key {
            " " => ("Space", 32, Some(" ")),
            "Enter" => ("Enter", 13, Some("\r")),
            "Tab" => ("Tab", 9, None),
            "Escape" => ("Escape", 27, None),
            "ArrowLeft" => ("ArrowLeft", 37, None),
            "ArrowUp" => ("ArrowUp", 38, None),
            "ArrowRight" => ("ArrowRight", 39, None),
            "ArrowDown" => ("ArrowDown", 40, None),
            _ => panic!("press: no key definition for {key:?}"),
        };
        let mut down = json!({
            "type": if text.is_some() { "keyDown" } else { "rawKeyDown" },
            "key": key, "code": code, "windowsVirtualKeyCode": key_code,
        });
        if let Some(text) = text {
            down["text"] = json!(text);
        }
        self.call("Input.dispatchKeyEvent", down);
        self.call(
            "Input.dispatchKeyEvent",
            json!({ "type": "keyUp", "key": key, "code": code, "windowsVirtualKeyCode": key_code }),
        );
    }

    /// Waits until the JavaScript `expression` is true (what the page's script does after a
    /// fetch), then checks the console.
    pub fn wait_until(&self, expression: &str) {
        self.poll(
            || {
                self.eval(expression)
                    .as_bool()
                    .unwrap_or(false)
                    .then_some(())
            },
            || format!("still not true after {TIMEOUT:?}: {expression}"),
        );
        self.assert_clean();
    }

    /// Whether the first element at `selector` is rendered (not hidden, nor inside a hidden
    /// ancestor).
    pub fn visible(&self, selector: &str) -> bool {
        let selector = serde_json::to_string(selector).expect("selector");
        self.eval(&format!(
            "(function () {{ var e = document.querySelector({selector}); \
             return !!e && e.getClientRects().length > 0; }})()"
        ))
        .as_bool()
        .unwrap_or(false)
    }

    /// Marks the current document, so that [`Session::wait_for_new_page`] can tell it from
    /// the next one.
    fn mark_page(&self) {
        self.eval("window.__intakeOldPage = true");
    }

    /// Waits until a new document (without the mark) has finished loading, then checks the
    /// console.
    fn wait_for_new_page(&self, after: &str) {
        self.poll(
            || {
                // Fails while the next document replaces this one: not loaded yet.
                self.evaluate(
                    "window.__intakeOldPage === undefined && document.readyState === 'complete'",
                    false,
                )
                .ok()
                .and_then(|v| v.as_bool())
                .unwrap_or(false)
                .then_some(())
            },
            || format!("no new page after {after} (still at {})", self.url()),
        );
        self.assert_clean();
    }

    /// The visible text of the first element at `selector`.
    pub fn text(&self, selector: &str) -> String {
        let text = self.on_element(selector, "return e.innerText;");
        text.as_str().unwrap_or_default().to_string()
    }

    /// Whether an element matches `selector` on the current page (no waiting).
    pub fn exists(&self, selector: &str) -> bool {
        let selector = Value::String(selector.to_string());
        self.eval(&format!("document.querySelector({selector}) !== null"))
            .as_bool()
            .unwrap_or(false)
    }

    /// The `value` of the input at `selector`.
    pub fn value(&self, selector: &str) -> String {
        let value = self.on_element(selector, "return e.value;");
        value.as_str().unwrap_or_default().to_string()
    }

    /// Waits until an element matches `selector` (up to [`TIMEOUT`]), then runs the
    /// JavaScript function body `body` on the first one (as `e`) and returns its result, as
    /// JSON. One DevTools call a try.
    fn on_element(&self, selector: &str, body: &str) -> Value {
        let quoted = Value::String(selector.to_string());
        let expression = format!(
            "(function () {{ var e = document.querySelector({quoted}); \
             if (e === null) {{ return null; }} \
             return JSON.stringify({{ result: (function (e) {{ {body} }})(e) }}); }})()"
        );
        let found = self.poll(
            || {
                self.evaluate(&expression, false)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_string))
            },
            || {
                format!(
                    "no element matches {selector} after {TIMEOUT:?} (at {})",
                    self.url()
                )
            },
        );
        let found: Value = serde_json::from_str(&found).expect("element JSON");
        found["result"].clone()
    }

    /// Tries `attempt` until it gives a value, for up to [`TIMEOUT`]; then fails the test with
    /// `failure`'s message.
    fn poll<T>(&self, mut attempt: impl FnMut() -> Option<T>, failure: impl Fn() -> String) -> T {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(value) = attempt() {
                return value;
            }
            assert!(Instant::now() < deadline, "{}", failure());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The result of a JavaScript expression, as JSON (`null` for `undefined`); fails the
    /// test if it throws.
    pub fn eval(&self, expression: &str) -> Value {
        self.evaluate(expression, false)
            .unwrap_or_else(|e| panic!("{e} (at {})", self.url()))
    }

    /// The value of `expression` (awaited if `await_promise` and it is a promise), or what
    /// it threw.
    fn evaluate(&self, expression: &str, await_promise: bool) -> Result<Value, String> {
        let answer = self.page.call(
            "Runtime.evaluate",
            json!({ "expression": expression, "returnByValue": true, "awaitPromise": await_promise }),
        )?;
        if let Some(details) = answer.get("exceptionDetails") {
            let what = details["exception"]["description"]
                .as_str()
                .or(details["text"].as_str())
                .unwrap_or("an exception");
            let start: String = expression.chars().take(200).collect();
            return Err(format!("{start} threw {what}"));
        }
        Ok(answer["result"]
            .get("value")
            .cloned()
            .unwrap_or(Value::Null))
    }

    /// Calls the DevTools `method` on the page; fails the test on an error.
    fn call(&self, method: &str, params: Value) -> Value {
        self.page
            .call(method, params)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// The page's own `location.href`, or why the page did not answer.
    pub fn url(&self) -> String {
        match self.evaluate("location.href", false) {
            Ok(Value::String(href)) => href,
            Ok(other) => format!("(location.href is {other})"),
            Err(e) => format!("(no answer: {e})"),
        }
    }

    /// The path and query of the current page.
    pub fn path(&self) -> String {
        self.url()
            .strip_prefix(&self.base)
            .unwrap_or_default()
            .to_string()
    }

    /// Emulates a phone's screen (390 × 844 CSS pixels, mobile) from now on.
    pub fn phone_width(&self) {
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({ "width": 390, "height": 844, "deviceScaleFactor": 1, "mobile": true }),
        );
    }

    /// Emulates the desktop window again (undoes [`Session::phone_width`]).
    pub fn desktop_width(&self) {
        self.call("Emulation.clearDeviceMetricsOverride", json!({}));
    }

    /// Emulates the system's colour scheme (`light` or `dark`) for `prefers-color-scheme`.
    pub fn color_scheme(&self, scheme: &str) {
        self.call(
            "Emulation.setEmulatedMedia",
            json!({ "media": "", "features": [{ "name": "prefers-color-scheme", "value": scheme }] }),
        );
        // theme.js follows the change of the media query.
        self.wait_until(&format!(
            "document.documentElement.getAttribute('data-theme') === '{scheme}'"
        ));
    }

    /// Screenshots of the page at desktop and phone widths in the light and dark schemes,
    /// `target/screenshots/{name}-{desktop|phone}-{light|dark}.png`; fails if the page is
    /// wider than the window at either width. Leaves the session at desktop width, light.
    pub fn screenshots(&self, name: &str) {
        for scheme in ["light", "dark"] {
            self.color_scheme(scheme);
            self.desktop_width();
            self.assert_fits_width();
            self.screenshot(&format!("{name}-desktop-{scheme}"));
            self.phone_width();
            self.assert_fits_width();
            self.screenshot(&format!("{name}-phone-{scheme}"));
        }
        self.desktop_width();
        self.color_scheme("light");
        self.assert_clean();
    }

    /// Runs axe-core (from npm, see `.ci/run`) on the page in the light and the dark scheme
    /// and fails on any serious or critical violation, listing each with the elements it
    /// found.
    pub fn assert_accessible(&self) {
        let source = std::fs::read_to_string(axe_core_path()).expect("read axe.min.js");
        for scheme in ["light", "dark"] {
            self.color_scheme(scheme);
            let loaded = self.eval(&format!("{source};typeof axe"));
            assert_eq!(loaded, json!("object"), "axe-core did not load");
            let run = "axe.run(document, { resultTypes: ['violations'] }).then(r =>                 JSON.stringify(r.violations.filter(v => v.impact === 'serious' ||                 v.impact === 'critical').map(v => ({ id: v.id, impact: v.impact, help: v.help,                 nodes: v.nodes.slice(0, 5).map(n => n.target.join(' ') + ': ' +                 n.failureSummary) }))))";
            let result = self
                .evaluate(run, true)
                .unwrap_or_else(|e| panic!("axe-core: {e}"));
            let text = result.as_str().expect("axe-core result");
            let violations: Value = serde_json::from_str(text).expect("axe JSON");
            assert_eq!(
                violations,
                json!([]),
                "serious or critical accessibility violations at {} ({scheme}):\n{}",
                self.url(),
                serde_json::to_string_pretty(&violations).unwrap_or_default()
            );
        }
        self.color_scheme("light");
    }

    /// Fails the test if the page is wider than the viewport (sideways scrolling).
    pub fn assert_fits_width(&self) {
        let widths = self.eval("[document.documentElement.scrollWidth, window.innerWidth]");
        assert!(
            widths[0].as_f64() <= widths[1].as_f64(),
            "{} is wider than the screen: [page, viewport] = {widths}",
            self.url()
        );
    }

    /// Fails the test if a column of the table at `table_selector` is hidden: after the table
    /// is scrolled to the top of the window, every header cell's box must lie inside the
    /// viewport, and the nearest ancestor that scrolls sideways (the `.table-wrap` region)
    /// must not have to. Self-contained: it reads the page alone.
    pub fn assert_table_headers_visible(&self, table_selector: &str) {
        let selector = serde_json::to_string(table_selector).expect("selector");
        let outcome = self.eval(&format!(
            "(function () {{ \
               var table = document.querySelector({selector}); \
               if (!table) {{ return 'no table matches'; }} \
               table.scrollIntoView({{ block: 'start', inline: 'nearest' }}); \
               var width = document.documentElement.clientWidth; \
               var height = document.documentElement.clientHeight; \
               var problems = []; \
               var cells = table.querySelectorAll('th'); \
               if (cells.length === 0) {{ problems.push('no header cells'); }} \
               Array.prototype.forEach.call(cells, function (th) {{ \
                 var r = th.getBoundingClientRect(); \
                 if (r.width === 0 || r.left < -0.5 || r.right > width + 0.5 || \
                     r.top < -0.5 || r.bottom > height + 0.5) {{ \
                   problems.push(JSON.stringify(th.textContent.trim()) + ' at x ' + \
                     Math.round(r.left) + '..' + Math.round(r.right) + ', y ' + \
                     Math.round(r.top) + '..' + Math.round(r.bottom)); \
                 }} \
               }}); \
               for (var box = table.parentElement; box; box = box.parentElement) {{ \
                 var overflow = getComputedStyle(box).overflowX; \
                 if (overflow === 'auto' || overflow === 'scroll') {{ \
                   if (box.scrollWidth > box.clientWidth + 1) {{ \
                     problems.push('its region scrolls sideways: ' + box.scrollWidth + \
                       ' px of content in ' + box.clientWidth + ' px'); \
                   }} \
                   break; \
                 }} \
               }} \
               return problems.join('; '); \
             }})()"
        ));
        let problems = outcome.as_str().unwrap_or("the check did not run");
        assert!(
            problems.is_empty(),
            "{table_selector} at {} hides columns in a {}-px window: {problems}",
            self.url(),
            self.eval("window.innerWidth")
        );
    }

    /// Emulates the computer's time zone (an IANA name such as `Pacific/Kiritimati`) from now
    /// on, for what the page's script and the date pickers make of local time.
    pub fn time_zone(&self, zone: &str) {
        self.call(
            "Emulation.setTimezoneOverride",
            json!({ "timezoneId": zone }),
        );
    }

    /// Saves a PNG of the viewport as `target/screenshots/{name}.png`; returns its path.
    pub fn screenshot(&self, name: &str) -> PathBuf {
        let shot = self.call(
            "Page.captureScreenshot",
            json!({ "format": "png", "fromSurface": true }),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().expect("screenshot data"))
            .expect("screenshot base64");
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .parent()
            .expect("target dir")
            .join("screenshots");
        std::fs::create_dir_all(&dir).expect("create screenshots dir");
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png).expect("write screenshot");
        println!("screenshot: {}", path.display());
        path
    }

    /// Fails the test if the page logged a console error, threw, or violated the CSP. The
    /// page's own 4xx status (a refused form shown again, an error page) is what the test
    /// looks at, not a broken resource: Chromium's log line about it is not a problem.
    pub fn assert_clean(&self) {
        // A call first: the events sent before its answer are read by then.
        let page = self.url();
        let own_status = format!("({page})");
        let mut problems = self.page.take_events();
        problems.retain(|p| {
            !(p.starts_with(
                "browser log error: Failed to load resource: the server responded with a status of 4",
            ) && p.ends_with(&own_status))
        });
        assert!(
            problems.is_empty(),
            "browser console errors at {page}:\n{}",
            problems.join("\n")
        );
    }
}
