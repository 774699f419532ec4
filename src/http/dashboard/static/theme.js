// intake dashboard: the colour theme, applied before the page paints (loaded without defer).
// The toggle's choice ("light" or "dark") is kept in localStorage; without one ("system"),
// the system's preference (prefers-color-scheme) decides and is followed when it changes.
"use strict";
(function () {
  var root = document.documentElement;
  var query = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  var picked = "system";
  try {
    picked = window.localStorage.getItem("intake-theme") || "system";
  } catch (e) {
    // Storage refused (private mode): the system decides.
  }
  function apply() {
    var dark = picked === "dark" || (picked === "system" && query !== null && query.matches);
    root.setAttribute("data-theme", dark ? "dark" : "light");
    root.setAttribute("data-theme-choice", picked);
  }
  apply();
  if (query !== null && query.addEventListener) {
    query.addEventListener("change", apply);
  }
  // The toggle in app.js reads and sets the choice through this.
  window.intakeTheme = {
    choice: function () { return picked; },
    set: function (choice) {
      picked = choice;
      try {
        if (choice === "system") {
          window.localStorage.removeItem("intake-theme");
        } else {
          window.localStorage.setItem("intake-theme", choice);
        }
      } catch (e) {
        // Without storage the choice lasts for this page only.
      }
      apply();
    }
  };
})();
