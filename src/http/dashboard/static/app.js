// intake dashboard: small progressive enhancements; every page works without this file.
"use strict";

document.addEventListener("click", function (event) {
  var target = event.target;
  if (!(target instanceof Element)) {
    return;
  }
  // Reveal buttons: data-reveal names the hidden input holding a key; the element `{id}-shown`
  // shows it instead of its masked text (data-masked) until pressed again.
  var reveal = target.closest("[data-reveal]");
  if (reveal) {
    var id = reveal.getAttribute("data-reveal");
    var hidden = document.getElementById(id);
    var shown = document.getElementById(id + "-shown");
    if (hidden && shown) {
      var show = reveal.getAttribute("aria-pressed") !== "true";
      shown.textContent = show ? hidden.value : shown.getAttribute("data-masked");
      reveal.setAttribute("aria-pressed", show ? "true" : "false");
      reveal.textContent = show ? "Hide" : "Reveal";
    }
    return;
  }
  // Copy buttons: data-copy names the id of the input whose value (or the element whose
  // text, such as a code example) is copied; a hidden input copies the key it keeps out of
  // sight.
  var copy = target.closest("[data-copy]");
  if (copy) {
    var source = document.getElementById(copy.getAttribute("data-copy"));
    if (source) {
      var isInput = source instanceof HTMLInputElement;
      if (isInput && source.type !== "hidden") {
        source.select();
      }
      var done = function () {
        copy.textContent = "Copied";
        window.setTimeout(function () { copy.textContent = "Copy"; }, 1500);
      };
      if (navigator.clipboard && window.isSecureContext) {
        var text = isInput ? source.value : source.textContent;
        navigator.clipboard.writeText(text).then(done, function () {});
      }
    }
    return;
  }
  // Destructive buttons ask first: data-confirm holds the question, and each box of the form
  // that has data-confirm-checked / -unchecked adds what its state will do to it.
  var confirmable = target.closest("button[data-confirm]");
  if (confirmable) {
    var question = confirmable.getAttribute("data-confirm");
    var boxes = confirmable.form ? confirmable.form.querySelectorAll("input[data-confirm-checked]") : [];
    for (var i = 0; i < boxes.length; i++) {
      var note = boxes[i].getAttribute(boxes[i].checked ? "data-confirm-checked" : "data-confirm-unchecked");
      if (note) {
        question += " " + note;
      }
    }
    if (!window.confirm(question)) {
      event.preventDefault();
    }
  }
});

// Filter forms submit when a select changes.
document.addEventListener("change", function (event) {
  var target = event.target;
  if (target instanceof HTMLSelectElement && target.form && target.form.classList.contains("filters")) {
    target.form.submit();
  }
});

// The theme toggle (theme.js applies the choice): system → light → dark → system.
(function () {
  var toggle = document.getElementById("theme-toggle");
  if (!toggle || !window.intakeTheme) {
    return;
  }
  var next = { system: "light", light: "dark", dark: "system" };
  var show = function () {
    toggle.textContent = "Theme: " + window.intakeTheme.choice();
  };
  toggle.hidden = false;
  show();
  toggle.addEventListener("click", function () {
    window.intakeTheme.set(next[window.intakeTheme.choice()] || "system");
    show();
  });
})();

// A form the server refused is shown again with its reason: bring the reason into view.
(function () {
  var error = document.querySelector("[data-form-error]");
  if (error) {
    error.setAttribute("tabindex", "-1");
    error.scrollIntoView({ block: "center" });
    error.focus({ preventScroll: true });
  }
})();

// On a phone the endpoint tabs scroll sideways: bring the current one into the strip, by
// scrolling the strip alone (scrollIntoView would move the page too).
(function () {
  var tab = document.querySelector(".tabs a[aria-current='page']");
  if (!tab) {
    return;
  }
  var strip = tab.parentElement;
  var shown = strip.getBoundingClientRect();
  var box = tab.getBoundingClientRect();
  if (box.right > shown.right) {
    strip.scrollLeft += box.right - shown.right;
  } else if (box.left < shown.left) {
    strip.scrollLeft -= shown.left - box.left;
  }
})();
