// intake dashboard: a small syntax highlighter for the code the pages show (JSON bodies and
// the curl, JavaScript and Python samples). It wraps tokens of every <code class="language-X">
// in spans with hl-* classes; the text itself never goes through innerHTML. Without this
// file the code shows plain.
"use strict";
(function () {
  var STRING = "\"(?:\\\\.|[^\"\\\\\\n])*\"|'(?:\\\\.|[^'\\\\\\n])*'";
  var NUMBER = "-?\\b\\d+(?:\\.\\d+)?(?:[eE][+-]?\\d+)?\\b";
  // Per language: one regex of alternatives, and the class of each capture group in order.
  var LANGUAGES = {
    json: {
      pattern: "(\"(?:\\\\.|[^\"\\\\])*\")(\\s*:)?|(" + NUMBER + ")|\\b(true|false|null)\\b",
      classes: ["string", null, "number", "literal"],
      keyAfter: true
    },
    bash: {
      pattern: "(#[^\\n]*)|(" + STRING + ")|(^|\\s)(--?[A-Za-z][\\w-]*)|\\b(curl)\\b",
      classes: ["comment", "string", null, "keyword", "literal"]
    },
    javascript: {
      pattern: "(\\/\\/[^\\n]*)|(" + STRING + "|`(?:\\\\.|[^`\\\\])*`)|\\b(const|let|var|await|async|function|return|new|if|else|throw|for|of)\\b|(" + NUMBER + ")|\\b(true|false|null|undefined)\\b",
      classes: ["comment", "string", "keyword", "number", "literal"]
    },
    python: {
      pattern: "(#[^\\n]*)|(" + STRING + ")|\\b(import|from|def|return|as|with|for|in|if|else|raise|print)\\b|(" + NUMBER + ")|\\b(True|False|None)\\b",
      classes: ["comment", "string", "keyword", "number", "literal"]
    }
  };
  LANGUAGES.shell = LANGUAGES.bash;
  LANGUAGES.js = LANGUAGES.javascript;

  function span(kind, text) {
    var s = document.createElement("span");
    s.className = "hl-" + kind;
    s.textContent = text;
    return s;
  }

  function highlight(code, language) {
    var text = code.textContent;
    var regex = new RegExp(language.pattern, "gm");
    var out = document.createDocumentFragment();
    var last = 0;
    var match;
    while ((match = regex.exec(text)) !== null) {
      if (match[0] === "") {
        regex.lastIndex += 1;
        continue;
      }
      out.appendChild(document.createTextNode(text.slice(last, match.index)));
      for (var g = 1; g < match.length; g += 1) {
        var piece = match[g];
        if (piece === undefined || piece === "") {
          continue;
        }
        var kind = language.classes[g - 1];
        // A JSON string followed by a colon is a key.
        if (language.keyAfter && g === 1 && match[2] !== undefined) {
          kind = "key";
        }
        out.appendChild(kind ? span(kind, piece) : document.createTextNode(piece));
      }
      last = match.index + match[0].length;
    }
    out.appendChild(document.createTextNode(text.slice(last)));
    code.textContent = "";
    code.appendChild(out);
    code.setAttribute("data-highlighted", "true");
  }

  function run(root) {
    var blocks = (root || document).querySelectorAll("code[class*='language-']:not([data-highlighted])");
    for (var i = 0; i < blocks.length; i += 1) {
      var name = /language-(\w+)/.exec(blocks[i].className);
      var language = name && LANGUAGES[name[1]];
      if (language) {
        highlight(blocks[i], language);
      }
    }
  }

  // Pages call it again for code they add later (the test page's responses).
  window.intakeHighlight = run;
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", function () { run(document); });
  } else {
    run(document);
  }
})();
