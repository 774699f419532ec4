// intake dashboard: the record browser's column chooser and the record editor's checks.
// Both pages work without this file (every column shows; the server checks every payload).
"use strict";

// The column chooser: a box per column; the choice is kept in localStorage under the key
// the chooser names (the endpoint and environment), as the columns the visitor changed
// from their default, so a column new to the page shows by its default.
(function () {
  var chooser = document.getElementById("column-chooser");
  var table = document.getElementById("records");
  if (!chooser || !table) {
    return;
  }
  var key = chooser.getAttribute("data-storage-key");
  var changed = {};
  try {
    changed = JSON.parse(window.localStorage.getItem(key) || "{}") || {};
  } catch (e) {
    changed = {};
  }
  var boxes = chooser.querySelectorAll("input[type=checkbox]");
  var show = function (column, shown) {
    var cells = table.querySelectorAll("[data-col]");
    for (var i = 0; i < cells.length; i++) {
      if (cells[i].getAttribute("data-col") === column) {
        cells[i].hidden = !shown;
      }
    }
  };
  for (var i = 0; i < boxes.length; i++) {
    var box = boxes[i];
    var byDefault = box.getAttribute("data-column-default") === "shown";
    var shown = Object.prototype.hasOwnProperty.call(changed, box.value) ? changed[box.value] === true : byDefault;
    box.checked = shown;
    show(box.value, shown);
  }
  chooser.hidden = false;
  chooser.addEventListener("change", function (event) {
    var box = event.target;
    if (!(box instanceof HTMLInputElement) || box.type !== "checkbox") {
      return;
    }
    show(box.value, box.checked);
    var byDefault = box.getAttribute("data-column-default") === "shown";
    if (box.checked === byDefault) {
      delete changed[box.value];
    } else {
      changed[box.value] = box.checked;
    }
    try {
      window.localStorage.setItem(key, JSON.stringify(changed));
    } catch (e) {
      // Storage may be off (private mode): the choice then lasts for this page only.
    }
  });
})();

// The record editor: before sending, the payload must be JSON (the error names its line and
// column), an object with the required fields when the endpoint has any, with each schema
// property of an allowed type, and within the size limit. The server checks all of it again.
(function () {
  var form = document.getElementById("record-editor");
  var editor = document.getElementById("payload");
  var message = document.getElementById("editor-check");
  if (!form || !editor || !message) {
    return;
  }
  var checks = {};
  try {
    checks = JSON.parse(form.getAttribute("data-checks") || "{}");
  } catch (e) {
    checks = {};
  }
  var typeOf = function (value) {
    if (value === null) { return "null"; }
    if (Array.isArray(value)) { return "array"; }
    return typeof value;
  };
  var allowed = function (value, types) {
    var type = typeOf(value);
    for (var i = 0; i < types.length; i++) {
      var t = types[i];
      if (t === type || (t === "integer" && type === "number" && Number.isInteger(value))) {
        return true;
      }
    }
    return false;
  };
  // Where `text` stops being JSON and what was expected there: JSON.parse's messages do
  // not always say where, so a small reader of the grammar finds the place.
  var syntaxError = function (text) {
    var i = 0;
    var fail = function (what) { throw { at: i, what: what }; };
    var space = function () {
      while (i < text.length && " \t\n\r".indexOf(text[i]) >= 0) { i++; }
    };
    var word = function (w) {
      if (text.slice(i, i + w.length) !== w) { fail("a value"); }
      i += w.length;
    };
    var string = function () {
      i++;
      while (i < text.length && text[i] !== "\"") {
        if (text.charCodeAt(i) < 0x20) { fail("a closing quote"); }
        if (text[i] === "\\") {
          i++;
          if (text[i] === "u") {
            if (!/^[0-9a-fA-F]{4}$/.test(text.slice(i + 1, i + 5))) { fail("four hex digits"); }
            i += 4;
          } else if (i >= text.length || "\"\\/bfnrt".indexOf(text[i]) < 0) {
            fail("an escape");
          }
        }
        i++;
      }
      if (i >= text.length) { fail("a closing quote"); }
      i++;
    };
    var value = function () {
      space();
      var c = text[i];
      if (c === "{" || c === "[") {
        var close = c === "{" ? "}" : "]";
        i++;
        space();
        if (text[i] === close) { i++; return; }
        for (;;) {
          if (c === "{") {
            space();
            if (text[i] !== "\"") { fail("a property name in double quotes"); }
            string();
            space();
            if (text[i] !== ":") { fail("a colon"); }
            i++;
          }
          value();
          space();
          if (text[i] === ",") { i++; continue; }
          if (text[i] === close) { i++; return; }
          fail("a comma or " + close);
        }
      }
      if (c === "\"") { string(); return; }
      if (c === "t") { word("true"); return; }
      if (c === "f") { word("false"); return; }
      if (c === "n") { word("null"); return; }
      var number = /^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/.exec(text.slice(i));
      if (!number) { fail("a value"); }
      i += number[0].length;
    };
    try {
      value();
      space();
      if (i < text.length) { fail("the end of the text"); }
      return null;
    } catch (e) {
      return e;
    }
  };
  // Line and column (from 1) of character `position` of the text.
  var where = function (text, position) {
    var before = text.slice(0, position).split("\n");
    return "line " + before.length + ", column " + (before[before.length - 1].length + 1);
  };
  var problem = function (text) {
    var bytes = new Blob([text]).size;
    if (checks.maxBytes && bytes > checks.maxBytes) {
      return "The payload is " + bytes + " bytes; at most " + checks.maxBytes + " are allowed.";
    }
    var value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      var error = syntaxError(text);
      if (error && typeof error.at === "number") {
        return "This is not valid JSON: at " + where(text, error.at) + ", " + error.what + " was expected.";
      }
      return "This is not valid JSON: " + e.message;
    }
    var required = (checks.required || []).concat(checks.notNull || []);
    var types = checks.types || {};
    var object = typeOf(value) === "object";
    if (!object && (required.length > 0 || Object.keys(types).length > 0)) {
      return "The payload must be a JSON object for this endpoint.";
    }
    for (var i = 0; i < required.length; i++) {
      if (!Object.prototype.hasOwnProperty.call(value, required[i])) {
        return "The payload is missing the required field “" + required[i] + "”.";
      }
    }
    var notNull = checks.notNull || [];
    for (var j = 0; j < notNull.length; j++) {
      if (value[notNull[j]] === null) {
        return "The required field “" + notNull[j] + "” must not be null.";
      }
    }
    for (var name in types) {
      if (Object.prototype.hasOwnProperty.call(types, name) && Object.prototype.hasOwnProperty.call(value, name) &&
          !allowed(value[name], types[name])) {
        return "“" + name + "” must be " + types[name].join(" or ") + ", not " + typeOf(value[name]) + ".";
      }
    }
    return null;
  };
  var show = function (text) {
    message.textContent = text || "";
    message.hidden = !text;
    if (text) {
      editor.setAttribute("aria-invalid", "true");
    } else {
      editor.removeAttribute("aria-invalid");
    }
  };
  form.addEventListener("submit", function (event) {
    var text = problem(editor.value);
    show(text);
    if (text) {
      event.preventDefault();
      editor.focus();
    }
  });
  editor.addEventListener("input", function () {
    if (!message.hidden) {
      show(problem(editor.value));
    }
  });
})();
