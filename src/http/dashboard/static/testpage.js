// intake dashboard: the API test page (tabs, authorizing with a sandbox key, executing the
// data calls, filling the key into the code examples). Loaded by that page only.
//
// The key lives in this script's memory only: never in a cookie, storage or a URL, and it is
// sent only to this server (the Authorize check, then the data calls). The server decides
// whether a key may be used here; this script only shows its verdict.
"use strict";

(function () {
  var root = document.getElementById("testpage");
  if (!root) {
    return;
  }
  var KEY_PLACEHOLDER = root.getAttribute("data-key-placeholder");
  var RECORD_PLACEHOLDER = root.getAttribute("data-record-placeholder");
  var state = { key: null, recordId: null, permissions: [] };
  var LOCKED = "Authorize with a sandbox key above first: the call is sent with it.";

  // Code on the page is highlighted by highlight.js; text this script replaces is highlighted
  // again.
  function rehighlight(el) {
    el.removeAttribute("data-highlighted");
    if (window.intakeHighlight) {
      window.intakeHighlight(el.parentNode || el);
    }
  }

  // Tabs (WAI-ARIA tabs pattern, automatic activation): without this script every panel
  // shows, one after the other.
  var tablist = root.querySelector("[role=tablist]");
  var tabs = Array.prototype.slice.call(tablist.querySelectorAll("[role=tab]"));
  function select(tab, focus) {
    tabs.forEach(function (t) {
      var selected = t === tab;
      t.setAttribute("aria-selected", selected ? "true" : "false");
      t.tabIndex = selected ? 0 : -1;
      document.getElementById(t.getAttribute("aria-controls")).hidden = !selected;
    });
    if (focus) {
      tab.focus();
    }
  }
  tablist.addEventListener("click", function (event) {
    var tab = event.target instanceof Element ? event.target.closest("[role=tab]") : null;
    if (tab) {
      select(tab, false);
    }
  });
  tablist.addEventListener("keydown", function (event) {
    var at = tabs.indexOf(document.activeElement);
    if (at < 0) {
      return;
    }
    var next = {
      ArrowRight: (at + 1) % tabs.length,
      ArrowLeft: (at + tabs.length - 1) % tabs.length,
      Home: 0,
      End: tabs.length - 1
    }[event.key];
    if (next !== undefined) {
      event.preventDefault();
      select(tabs[next], true);
    }
  });
  tablist.hidden = false;
  select(tabs[0], false);

  // Code examples and header lines carry placeholders: show the authorized key and the last
  // created record id instead. The original text is kept to return to when the key is forgotten.
  function fill() {
    Array.prototype.forEach.call(root.querySelectorAll(".fill"), function (el) {
      if (el.dataset.template === undefined) {
        el.dataset.template = el.textContent;
      }
      var text = el.dataset.template;
      if (state.key) {
        text = text.split(KEY_PLACEHOLDER).join(state.key);
      }
      if (state.recordId) {
        text = text.split(RECORD_PLACEHOLDER).join(state.recordId);
      }
      if (el.textContent !== text) {
        el.textContent = text;
        rehighlight(el);
      }
    });
  }

  var authForm = document.getElementById("authorize-form");
  var keyInput = document.getElementById("test-key");
  var authorized = document.getElementById("authorized");
  var message = document.getElementById("auth-message");
  var calls = Array.prototype.slice.call(root.querySelectorAll("form.call"));

  function say(text) {
    message.textContent = text;
    message.hidden = !text;
  }

  // Each call says why it cannot be sent yet: no key, or a key without its permission (a
  // collaboration key); those calls' buttons are disabled.
  function setAuthorized(key, permissions) {
    state.key = key;
    state.permissions = permissions || [];
    keyInput.value = "";
    authForm.hidden = key !== null;
    authorized.hidden = key === null;
    document.getElementById("authorized-key").textContent = key ? key.slice(0, 12) + "…" : "";
    var all = state.permissions.length === 4;
    document.getElementById("authorized-permissions").textContent =
      key && !all ? ", allowed: " + state.permissions.join(", ") : "";
    document.getElementById("calls-locked").hidden = key !== null;
    calls.forEach(function (form) {
      var needed = form.getAttribute("data-permission");
      var lacks = key !== null && state.permissions.indexOf(needed) < 0;
      form.querySelector("fieldset").disabled = false;
      form.querySelector("button[type=submit]").disabled = lacks;
      form.classList.toggle("lacking", lacks);
      var note = form.querySelector(".call-note");
      note.textContent = key === null ? LOCKED
        : lacks ? "This key lacks the " + needed + " permission: the call would be refused with 403."
        : "";
    });
    fill();
    (key ? document.getElementById("forget-key") : keyInput).focus();
  }

  function check(body, key) {
    body.set("csrf", root.getAttribute("data-csrf"));
    fetch(root.getAttribute("data-authorize"), {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { Accept: "application/json" }
    })
      .then(function (response) {
        if (!response.ok) {
          throw new Error("HTTP " + response.status);
        }
        return response.json();
      })
      .then(function (verdict) {
        if (verdict.authorized) {
          say("");
          setAuthorized(verdict.key || key, verdict.permissions);
        } else {
          say(verdict.message);
        }
      })
      .catch(function (error) {
        say("The key could not be checked (" + error.message + "). Reload the page and try again.");
      });
  }

  authForm.addEventListener("submit", function (event) {
    event.preventDefault();
    var key = keyInput.value.trim();
    if (!key) {
      say("Paste a sandbox key (tm_test_…) first.");
      return;
    }
    var body = new URLSearchParams();
    body.set("key", key);
    check(body, key);
  });

  // The signed-in viewer's own sandbox key (the owner's default key or their collaboration
  // key), without copying it from the Sandbox tab.
  var useMine = document.getElementById("use-mine");
  useMine.hidden = false;
  useMine.addEventListener("click", function () {
    var body = new URLSearchParams();
    body.set("mine", "1");
    check(body, null);
  });

  document.getElementById("forget-key").addEventListener("click", function () {
    setAuthorized(null);
  });

  // Executing a call: the form's inputs fill the path, the query and the optional headers.

  // Indents JSON two spaces a level, as JSON.stringify(value, null, 2) does, but on the text:
  // going through values would round numbers past 2^53 and write `1E2` as `100`, and a
  // payload must be shown as stored. A body that is not JSON is shown as it came.
  function formatBody(text) {
    try {
      JSON.parse(text);
    } catch (e) {
      return text;
    }
    var out = "";
    var depth = 0;
    var i = 0;
    function isSpace(c) {
      return c !== "" && " \t\n\r".indexOf(c) >= 0;
    }
    function newline() {
      return "\n" + new Array(depth + 1).join("  ");
    }
    while (i < text.length) {
      var c = text.charAt(i);
      i += 1;
      if (c === '"') {
        var start = i - 1;
        while (text.charAt(i) !== '"') {
          i += text.charAt(i) === "\\" ? 2 : 1;
        }
        i += 1;
        out += text.slice(start, i);
      } else if (c === "{" || c === "[") {
        var next = i;
        while (isSpace(text.charAt(next))) {
          next += 1;
        }
        if (text.charAt(next) === "}" || text.charAt(next) === "]") {
          out += c + text.charAt(next);
          i = next + 1;
        } else {
          depth += 1;
          out += c + newline();
        }
      } else if (c === "}" || c === "]") {
        depth -= 1;
        out += newline() + c;
      } else if (c === ",") {
        out += "," + newline();
      } else if (c === ":") {
        out += ": ";
      } else if (!isSpace(c)) {
        out += c;
      }
    }
    return out;
  }

  function useRecord(id) {
    state.recordId = id;
    Array.prototype.forEach.call(root.querySelectorAll("input[data-param=record_id]"), function (input) {
      input.value = id;
    });
    fill();
  }

  function show(form, requestLine, status, headers, body) {
    var result = form.querySelector(".result");
    result.querySelector(".request-line").textContent = requestLine;
    var statusLine = result.querySelector(".status");
    statusLine.textContent = status;
    statusLine.className = "status s" + String(status).charAt(5);
    result.querySelector(".headers").textContent = headers;
    var bodyCode = result.querySelector(".response-body");
    bodyCode.textContent = body;
    rehighlight(bodyCode);
    result.hidden = false;
  }

  calls.forEach(function (form) {
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (!state.key) {
        form.querySelector(".call-note").textContent = LOCKED;
        keyInput.focus();
        return;
      }
      var method = form.getAttribute("data-method");
      var path = form.getAttribute("data-path");
      var query = new URLSearchParams();
      var headers = { Authorization: "Bearer " + state.key };
      var inputs = form.querySelectorAll("input[data-param]");
      for (var i = 0; i < inputs.length; i++) {
        var input = inputs[i];
        var name = input.getAttribute("data-param");
        var where = input.getAttribute("data-in");
        var value = input.value.trim();
        if (where === "path") {
          if (!value) {
            input.focus();
            show(form, method + " " + path, "Fill in " + name + " first.", "", "");
            return;
          }
          path = path.replace("{" + name + "}", encodeURIComponent(value));
        } else if (value && where === "query") {
          query.append(name, value);
        } else if (value) {
          headers[name] = value;
        }
      }
      var init = { method: method, headers: headers, credentials: "omit" };
      var body = form.querySelector("[data-body]");
      if (body) {
        headers["Content-Type"] = "application/json";
        init.body = body.value;
      }
      var url = path + (query.toString() ? "?" + query.toString() : "");
      fetch(url, init)
        .then(function (response) {
          return response.text().then(function (text) {
            var lines = [];
            response.headers.forEach(function (value, name) {
              lines.push(name + ": " + value);
            });
            show(form, method + " " + url, "HTTP " + response.status + " " + response.statusText,
              lines.join("\n"), formatBody(text));
            if (method === "POST" && response.status === 202) {
              var created = JSON.parse(text);
              // A batch answers its records in the order sent: the last is the newest.
              var records = created && Array.isArray(created.data) ? created.data : [created];
              var last = records[records.length - 1];
              if (last && typeof last.id === "string") {
                useRecord(last.id);
              }
            }
          });
        })
        .catch(function (error) {
          show(form, method + " " + url, "The call did not complete: " + error.message, "", "");
        });
    });
  });
  setAuthorized(null);
  // setAuthorized focused the key input; the page should open where it starts.
  keyInput.blur();

  // API Reference: the table of contents opens the card it links to; all cards open or
  // close at once; code examples show one language at a time, the same on every card, and
  // the choice is remembered.
  function openCard(id) {
    var card = document.getElementById(id);
    if (card) {
      card.open = true;
    }
  }
  root.addEventListener("click", function (event) {
    var link = event.target instanceof Element ? event.target.closest("[data-open]") : null;
    if (link) {
      openCard(link.getAttribute("data-open"));
    }
  });
  if (window.location.hash.indexOf("#ref-") === 0) {
    openCard(window.location.hash.slice(1));
  }
  function setAllCards(open) {
    Array.prototype.forEach.call(root.querySelectorAll("details.api-card"), function (card) {
      card.open = open;
    });
  }
  document.getElementById("expand-all").addEventListener("click", function () { setAllCards(true); });
  document.getElementById("collapse-all").addEventListener("click", function () { setAllCards(false); });

  var sampleSets = Array.prototype.slice.call(root.querySelectorAll("[data-samples]"));
  function showLanguage(label) {
    sampleSets.forEach(function (set) {
      Array.prototype.forEach.call(set.querySelectorAll(".sample-tab"), function (tab) {
        var selected = tab.getAttribute("data-label") === label;
        tab.setAttribute("aria-selected", selected ? "true" : "false");
        tab.tabIndex = selected ? 0 : -1;
        document.getElementById(tab.getAttribute("aria-controls")).hidden = !selected;
      });
    });
    try {
      window.localStorage.setItem("intake-sample-language", label);
    } catch (e) {
      // Not remembered without storage.
    }
  }
  sampleSets.forEach(function (set) {
    var list = set.querySelector("[role=tablist]");
    list.hidden = false;
    Array.prototype.forEach.call(set.querySelectorAll(".sample"), function (panel) {
      panel.setAttribute("role", "tabpanel");
      panel.setAttribute("aria-labelledby", panel.id.replace(/^panel-/, "tab-"));
    });
    list.addEventListener("click", function (event) {
      var tab = event.target instanceof Element ? event.target.closest("[role=tab]") : null;
      if (tab) {
        showLanguage(tab.getAttribute("data-label"));
      }
    });
    list.addEventListener("keydown", function (event) {
      var own = Array.prototype.slice.call(list.querySelectorAll("[role=tab]"));
      var at = own.indexOf(document.activeElement);
      var step = { ArrowRight: 1, ArrowLeft: own.length - 1 }[event.key];
      if (at >= 0 && step !== undefined) {
        event.preventDefault();
        var next = own[(at + step) % own.length];
        showLanguage(next.getAttribute("data-label"));
        next.focus();
      }
    });
  });
  var remembered = null;
  try {
    remembered = window.localStorage.getItem("intake-sample-language");
  } catch (e) {
    remembered = null;
  }
  var first = root.querySelector(".sample-tab");
  if (first) {
    var known = remembered && root.querySelector(".sample-tab[data-label='" + remembered.replace(/[^a-z]/g, "") + "']");
    showLanguage(known ? remembered : first.getAttribute("data-label"));
  }
})();
